package capability

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDefaultScheduling(t *testing.T) {
	t.Parallel()
	require.Equal(t, Scheduling{Priority: 3, Weight: 1, MaxConcurrency: 0}, DefaultScheduling())
	require.False(t, DefaultScheduling().Capped())
	require.True(t, Scheduling{Priority: 3, Weight: 1, MaxConcurrency: 1}.Capped())
}

func TestSchedulingWithDefaults(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   Scheduling
		want Scheduling
	}{
		{name: "zero value", in: Scheduling{}, want: DefaultScheduling()},
		{name: "cap kept", in: Scheduling{MaxConcurrency: 4}, want: Scheduling{Priority: 3, Weight: 1, MaxConcurrency: 4}},
		{name: "priority kept", in: Scheduling{Priority: 1}, want: Scheduling{Priority: 1, Weight: 1}},
		{name: "weight kept", in: Scheduling{Weight: 10}, want: Scheduling{Priority: 3, Weight: 10}},
		{name: "all set", in: Scheduling{Priority: 5, Weight: 1000, MaxConcurrency: 16}, want: Scheduling{Priority: 5, Weight: 1000, MaxConcurrency: 16}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, tt.in.WithDefaults())
		})
	}
}

func TestParseScheduling(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		doc  string
		want Scheduling
	}{
		{name: "absent: defaults", doc: "id: a", want: Scheduling{Priority: 3, Weight: 1, MaxConcurrency: 0}},
		{name: "null: defaults", doc: "id: a\nscheduling: null", want: DefaultScheduling()},
		{name: "empty: defaults", doc: "id: a\nscheduling: {}", want: DefaultScheduling()},
		{name: "null keys: defaults", doc: "id: a\nscheduling: {priority: null, weight: null, max_concurrency: null}", want: DefaultScheduling()},
		{name: "every key", doc: "id: a\nscheduling: {priority: 1, weight: 10, max_concurrency: 4}",
			want: Scheduling{Priority: 1, Weight: 10, MaxConcurrency: 4}},
		{name: "block style", doc: "id: a\nscheduling:\n  priority: 4\n  max_concurrency: 16\n",
			want: Scheduling{Priority: 4, Weight: 1, MaxConcurrency: 16}},
		{name: "priority only", doc: "id: a\nscheduling: {priority: 2}", want: Scheduling{Priority: 2, Weight: 1}},
		{name: "weight only", doc: "id: a\nscheduling: {weight: 3}", want: Scheduling{Priority: 3, Weight: 3}},
		{name: "max_concurrency only", doc: "id: a\nscheduling: {max_concurrency: 1}", want: Scheduling{Priority: 3, Weight: 1, MaxConcurrency: 1}},
		{name: "lowest bounds", doc: "id: a\nscheduling: {priority: 1, weight: 1, max_concurrency: 0}", want: Scheduling{Priority: 1, Weight: 1}},
		{name: "highest bounds", doc: "id: a\nscheduling: {priority: 5, weight: 1000, max_concurrency: 1000000}",
			want: Scheduling{Priority: 5, Weight: 1000, MaxConcurrency: 1000000}},
		{name: "zero fraction is an integer, as everywhere in the document", doc: "id: a\nscheduling: {priority: 2.0}", want: Scheduling{Priority: 2, Weight: 1}},
		{name: "JSON", doc: `{"id":"a","scheduling":{"priority":4,"weight":2,"max_concurrency":16}}`,
			want: Scheduling{Priority: 4, Weight: 2, MaxConcurrency: 16}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, err := Parse([]byte(tt.doc), Env{})
			require.NoError(t, err)
			require.Equal(t, tt.want, p.Scheduling)
		})
	}
}

func TestParseSchedulingErrors(t *testing.T) {
	t.Parallel()
	const (
		priority = "scheduling.priority: must be an integer from 1 to 5"
		weight   = "scheduling.weight: must be an integer from 1 to 1000"
		maxConc  = "scheduling.max_concurrency: must be an integer of at least 0"
	)
	tests := []struct {
		name string
		doc  string
		want []string
	}{
		{name: "priority 0", doc: "scheduling: {priority: 0}", want: []string{priority}},
		{name: "priority 6", doc: "scheduling: {priority: 6}", want: []string{priority}},
		{name: "priority -1", doc: "scheduling: {priority: -1}", want: []string{priority}},
		{name: "priority 2.5", doc: "scheduling: {priority: 2.5}", want: []string{priority}},
		{name: "priority string", doc: `scheduling: {priority: "3"}`, want: []string{priority}},
		{name: "priority boolean", doc: "scheduling: {priority: true}", want: []string{priority}},
		{name: "priority YAML 1.1 boolean", doc: "scheduling: {priority: yes}", want: []string{priority}},
		{name: "priority list", doc: "scheduling: {priority: [1]}", want: []string{priority}},
		{name: "priority mapping", doc: "scheduling: {priority: {level: 1}}", want: []string{priority}},
		{name: "priority huge", doc: "scheduling: {priority: 99999999999999999999}", want: []string{priority}},
		{name: "weight 0", doc: "scheduling: {weight: 0}", want: []string{weight}},
		{name: "weight 1001", doc: "scheduling: {weight: 1001}", want: []string{weight}},
		{name: "weight -1", doc: "scheduling: {weight: -1}", want: []string{weight}},
		{name: "weight 2.5", doc: "scheduling: {weight: 2.5}", want: []string{weight}},
		{name: "weight string", doc: `scheduling: {weight: "3"}`, want: []string{weight}},
		{name: "weight boolean", doc: "scheduling: {weight: true}", want: []string{weight}},
		{name: "max_concurrency -1", doc: "scheduling: {max_concurrency: -1}", want: []string{maxConc}},
		{name: "max_concurrency 2.5", doc: "scheduling: {max_concurrency: 2.5}", want: []string{maxConc}},
		{name: "max_concurrency string", doc: `scheduling: {max_concurrency: "3"}`, want: []string{maxConc}},
		{name: "max_concurrency boolean", doc: "scheduling: {max_concurrency: false}", want: []string{maxConc}},
		{name: "max_concurrency beyond int64", doc: "scheduling: {max_concurrency: 1e30}", want: []string{maxConc}},
		{name: "unknown key", doc: "scheduling: {prio: 1}", want: []string{"scheduling.prio: unknown key"}},
		{name: "unknown keys sorted, before the known ones", doc: "scheduling: {zz: 1, weight: 0, aa: 2}",
			want: []string{"scheduling.aa: unknown key", "scheduling.zz: unknown key", weight}},
		{name: "all at once", doc: "scheduling: {priority: 0, weight: 1001, max_concurrency: -1, burst: 2}",
			want: []string{"scheduling.burst: unknown key", priority, weight, maxConc}},
		{name: "not a mapping: number", doc: "scheduling: 3", want: []string{"scheduling: must be a mapping"}},
		{name: "not a mapping: list", doc: "scheduling: [1, 1, 0]", want: []string{"scheduling: must be a mapping"}},
		{name: "not a mapping: string", doc: "scheduling: high", want: []string{"scheduling: must be a mapping"}},
		{name: "with the problems of other sections, in document order",
			doc:  "process: {limits: {pids: 4}}\nscheduling: {priority: 9}\nbudget: {result_chars: 0}",
			want: []string{"process.limits.pids: 4 is below the minimum of 16", priority, "budget.result_chars: must be an integer greater than 0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, err := Parse([]byte("id: a\n"+tt.doc), Env{})
			require.Nil(t, p)
			require.ErrorIs(t, err, ErrInvalidDocument)
			var de *DocumentError
			require.True(t, errors.As(err, &de))
			got := make([]string, len(de.Problems))
			for i, pr := range de.Problems {
				got[i] = pr.Message
				require.Contains(t, pr.Message, pr.Key+": ", "a problem's message starts with its key")
			}
			require.Equal(t, tt.want, got)
		})
	}
}

func TestSchedulingProblemKeys(t *testing.T) {
	t.Parallel()
	_, err := Parse([]byte("id: a\nscheduling: {weight: 0, extra: 1}"), Env{})
	var de *DocumentError
	require.ErrorAs(t, err, &de)
	require.Equal(t, []Problem{
		{Key: "scheduling.extra", Message: "scheduling.extra: unknown key"},
		{Key: "scheduling.weight", Message: "scheduling.weight: must be an integer from 1 to 1000"},
	}, de.Problems)
	require.EqualError(t, err, "invalid personality document: scheduling.extra: unknown key; scheduling.weight: must be an integer from 1 to 1000")
}

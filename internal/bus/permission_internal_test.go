package bus

import "testing"

func TestSubjectMatch(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		pattern, subject string
		want             bool
	}{
		{"a.b", "a.b", true},
		{"a.b", "a.c", false},
		{"a.b", "a.b.c", false},
		{"a.b.c", "a.b", false},
		{"a.*", "a.b", true},
		{"a.*", "a.b.c", false},
		{"a.>", "a.b.c", true},
		{"a.>", "a", false},
		{">", "a", true},
		{"$JS.API.CONSUMER.*.CAPSTAN_DLQ.>", "$JS.API.CONSUMER.CREATE.CAPSTAN_DLQ.n_1.capstan.dlq.>", true},
		{"$JS.API.CONSUMER.*.CAPSTAN_DLQ", "$JS.API.CONSUMER.CREATE.CAPSTAN_DLQ", true},
		{"$JS.API.CONSUMER.*.CAPSTAN_DLQ.>", "$JS.API.CONSUMER.CREATE.CAPSTAN_DLQX.n", false},
		{"$KV.capstan_personalities.x", "$KV.capstan_personalities.x", true},
	} {
		if got := subjectMatch(tc.pattern, tc.subject); got != tc.want {
			t.Errorf("subjectMatch(%q, %q) = %v, want %v", tc.pattern, tc.subject, got, tc.want)
		}
	}
}

package explain

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// Rows lays a grant out as (label, value) rows, as "dispatcher explain"
// prints them and the console shows them.
func Rows(g *GrantView) [][2]string {
	var rows [][2]string
	add := func(label, value string) { rows = append(rows, [2]string{label, value}) }
	if g.Network == nil && g.FSReach == nil && g.Secrets == nil && g.Process == nil && g.Storage == nil {
		add("reach", "nothing external (no capabilities declared)")
	}
	if n := g.Network; n != nil {
		add("network", orNone(n.Hosts, "none (the personality's safety.network allows this tool no host)"))
		if len(n.Deny) > 0 {
			add("network deny", strings.Join(n.Deny, ", "))
		}
		if n.AllowPrivateURLs {
			add("private addresses", "allowed (safety.network.allow_private_urls)")
		}
	}
	if f := g.FSReach; f != nil {
		add("files read", orNone(f.Read, "none"))
		add("files write", orNone(f.Write, "none"))
		add("working dir", cmp.Or(f.WorkingDir, "none"))
	}
	if s := g.Secrets; s != nil {
		add("secrets", orNone(s.Refs, "none"))
		add("raw secrets", orNone(s.Raw, "none (the tool never reads a value; secrets are injected at egress)"))
		if len(s.SendTo) == 0 {
			add("send_to", "none (no secret is sent over HTTP)")
		}
		label := "send_to"
		for _, ref := range slices.Sorted(maps.Keys(s.SendTo)) {
			add(label, ref+" -> "+strings.Join(s.SendTo[ref], ", "))
			label = ""
		}
	}
	if p := g.Process; p != nil {
		add("binaries", orNone(p.Binaries, "none"))
		cpu := "unlimited"
		if p.Limits.CPU > 0 {
			cpu = strconv.FormatFloat(p.Limits.CPU, 'g', -1, 64)
		}
		add("process limits", fmt.Sprintf("memory %s, pids %d, cpu %s, tmp %s", p.Limits.Memory, p.Limits.Pids, cpu, p.Limits.Tmp))
	}
	if s := g.Storage; s != nil {
		v := fmt.Sprintf("%s scope %s (%s)", s.Kind, s.Scope, s.ScopeID)
		if s.TTLSecondsDefault > 0 {
			v += fmt.Sprintf(", default ttl %ds", s.TTLSecondsDefault)
		}
		add("storage", v)
	}
	if r := g.RateLimit; r != nil {
		add("rate limit", fmt.Sprintf("%d calls per %s (fleet-wide)", r.Requests, r.Window))
	}
	if a := g.Approval; a != nil {
		add("approval", a.String())
	}
	add("scheduling", g.Scheduling.String())
	b := g.Budget
	budget := fmt.Sprintf("%d chars (personality %d", b.ResultChars, b.PersonalityResultChars)
	if b.ToolMaxResultChars > 0 {
		budget += fmt.Sprintf(", tool at most %d", b.ToolMaxResultChars)
	}
	add("result budget", budget+")")
	if b.BlobsAllowed {
		add("blobs", "allowed")
	} else {
		add("blobs", "forbidden by the personality (budget.blobs: false)")
	}
	return rows
}

func orNone(s []string, none string) string {
	if len(s) == 0 {
		return none
	}
	return strings.Join(s, ", ")
}

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/capstanhq/capstan/client"
	"github.com/capstanhq/capstan/internal/bus"
)

// cmdPersonality manages the personalities bucket: put and validate check a
// document against every tool in the catalog and print every problem.
func (a *app) cmdPersonality(ctx context.Context, args []string) int {
	fs := a.flags("personality")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return exitUsage
	}
	want := map[string]string{"put": "<file|dir>...", "get": "<id>", "validate": "<file>", "delete": "<id>", "list": ""}
	if len(pos) == 0 {
		a.errorf("personality: expected put, get, list, validate or delete")
		fs.Usage()
		return exitUsage
	}
	verb := pos[0]
	arg, known := want[verb]
	if !known {
		a.errorf("personality: unknown subcommand %q (expected put, get, list, validate or delete)", verb)
		return exitUsage
	}
	if (arg == "" && len(pos) != 1) || (verb == "put" && len(pos) < 2) || (arg != "" && verb != "put" && len(pos) != 2) {
		a.errorf("personality %s: expected %s", verb, arg)
		return exitUsage
	}
	var doc []byte
	var docs []personalityFile
	switch verb {
	case "validate":
		if doc, err = a.readFile(pos[1]); err != nil {
			a.errorf("personality %s: %v", verb, err)
			return exitUsage
		}
	case "put":
		if docs, err = a.readPersonalityFiles(pos[1:]); err != nil {
			a.errorf("personality put: %v", err)
			return exitUsage
		}
	}
	c, closeFn, ok := a.setup(ctx)
	if !ok {
		return exitUsage
	}
	defer closeFn()
	switch verb {
	case "validate":
		id, problems, err := c.ValidatePersonality(ctx, doc)
		if err != nil {
			a.errorf("personality validate: %v", err)
			return exitUsage
		}
		if len(problems) > 0 {
			a.printProblems(pos[1], problems)
			return exitFailed
		}
		fmt.Fprintf(a.stdout, "personality %s is valid\n", id)
	case "put":
		return a.putPersonalities(ctx, c, docs)
	case "get":
		doc, err := c.Personality(ctx, pos[1])
		if err != nil {
			a.errorf("personality get: %v", err)
			return exitCode(err)
		}
		_, _ = a.stdout.Write(doc)
	case "list":
		ids, err := c.Personalities(ctx)
		if err != nil {
			a.errorf("personality list: %v", err)
			return exitUsage
		}
		for _, id := range ids {
			fmt.Fprintln(a.stdout, id)
		}
	case "delete":
		if err := c.DeletePersonality(ctx, pos[1]); err != nil {
			a.errorf("personality delete: %v%s", err, operatorHint(err))
			return exitCode(err)
		}
		fmt.Fprintf(a.stdout, "deleted personality %s\n", pos[1])
	}
	return exitOK
}

// operatorHint says who may write personalities when the NATS server
// refused this user.
func operatorHint(err error) string {
	if errors.Is(err, bus.ErrPermissionDenied) {
		return " (only the operator NATS user may write personalities; docs/operations.md, \"NATS users\")"
	}
	return ""
}

func exitCode(err error) int {
	if errors.Is(err, client.ErrUnknownPersonality) {
		return exitFailed
	}
	return exitUsage
}

func (a *app) printProblems(file string, problems []client.Problem) {
	for _, p := range problems {
		fmt.Fprintf(a.stderr, "%s: %s\n", file, p)
	}
}

// personalityFile is one document given to personality put.
type personalityFile struct {
	name string // as given, or <dir>/<entry>
	doc  []byte
}

// readPersonalityFiles reads the documents of personality put: each argument
// is a file, "-" for stdin, or a directory whose *.yaml, *.yml and *.json
// entries (any letter case, in name order) are read, as the worker reads
// CAPSTAN_PERSONALITIES_DIR.
func (a *app) readPersonalityFiles(args []string) ([]personalityFile, error) {
	var out []personalityFile
	for _, arg := range args {
		if arg != "-" {
			if st, err := os.Stat(arg); err == nil && st.IsDir() {
				entries, err := os.ReadDir(arg)
				if err != nil {
					return nil, err
				}
				n := len(out)
				for _, e := range entries {
					ext := strings.ToLower(filepath.Ext(e.Name()))
					if e.IsDir() || (ext != ".yaml" && ext != ".yml" && ext != ".json") {
						continue
					}
					name := filepath.Join(arg, e.Name())
					doc, err := os.ReadFile(name)
					if err != nil {
						return nil, err
					}
					out = append(out, personalityFile{name: name, doc: doc})
				}
				if len(out) == n {
					return nil, fmt.Errorf("%s holds no .yaml, .yml or .json file", arg)
				}
				continue
			}
		}
		doc, err := a.readFile(arg)
		if err != nil {
			return nil, err
		}
		out = append(out, personalityFile{name: arg, doc: doc})
	}
	return out, nil
}

// putPersonalities validates every document and stores them all, or none
// when any has a problem (every problem is printed) or two share an id.
func (a *app) putPersonalities(ctx context.Context, c *client.Client, files []personalityFile) int {
	ids := make([]string, len(files))
	byID := map[string]string{}
	var bad []string
	for i, f := range files {
		id, problems, err := c.ValidatePersonality(ctx, f.doc)
		if err != nil {
			a.errorf("personality put: %s: %v", f.name, err)
			return exitUsage
		}
		if other, dup := byID[id]; dup && len(problems) == 0 {
			problems = []client.Problem{{Message: fmt.Sprintf("id %q is also defined in %s", id, other)}}
		}
		if len(problems) > 0 {
			a.printProblems(f.name, problems)
			bad = append(bad, f.name)
			continue
		}
		ids[i], byID[id] = id, f.name
	}
	switch {
	case len(bad) > 0 && len(files) == 1:
		a.errorf("personality put: %s not stored", bad[0])
		return exitFailed
	case len(bad) > 0:
		a.errorf("personality put: nothing stored: %s not valid", strings.Join(bad, ", "))
		return exitFailed
	}
	for i, f := range files {
		if _, _, err := c.PutPersonality(ctx, f.doc); err != nil {
			a.errorf("personality put: %s (id %s): %v%s", f.name, ids[i], err, operatorHint(err))
			return exitUsage
		}
		fmt.Fprintf(a.stdout, "stored personality %s\n", ids[i])
	}
	return exitOK
}

// readFile reads a file, or stdin for "-".
func (a *app) readFile(name string) ([]byte, error) {
	if name == "-" {
		return io.ReadAll(a.stdin)
	}
	return os.ReadFile(name)
}

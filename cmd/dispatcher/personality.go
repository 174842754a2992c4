package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/capstanhq/capstan/client"
)

// cmdPersonality manages the personalities bucket: put and validate check a
// document against every tool in the catalog and print every problem.
func (a *app) cmdPersonality(ctx context.Context, args []string) int {
	fs := a.flags("personality")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return exitUsage
	}
	want := map[string]string{"put": "<file>", "get": "<id>", "validate": "<file>", "delete": "<id>", "list": ""}
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
	if (arg == "" && len(pos) != 1) || (arg != "" && len(pos) != 2) {
		a.errorf("personality %s: expected %s", verb, arg)
		return exitUsage
	}
	var doc []byte
	if verb == "put" || verb == "validate" {
		if doc, err = a.readFile(pos[1]); err != nil {
			a.errorf("personality %s: %v", verb, err)
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
		id, problems, err := c.PutPersonality(ctx, doc)
		if errors.Is(err, client.ErrInvalidPersonality) {
			a.printProblems(pos[1], problems)
			a.errorf("personality put: %s not stored", pos[1])
			return exitFailed
		}
		if err != nil {
			a.errorf("personality put: %v", err)
			return exitUsage
		}
		fmt.Fprintf(a.stdout, "stored personality %s\n", id)
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
			a.errorf("personality delete: %v", err)
			return exitCode(err)
		}
		fmt.Fprintf(a.stdout, "deleted personality %s\n", pos[1])
	}
	return exitOK
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

// readFile reads a file, or stdin for "-".
func (a *app) readFile(name string) ([]byte, error) {
	if name == "-" {
		return io.ReadAll(a.stdin)
	}
	return os.ReadFile(name)
}

package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/capstanhq/capstan/internal/secrets"
	"github.com/capstanhq/capstan/tool"
)

// IsInfra reports whether a tool's error is an infrastructure fault (a
// secrets backend or a Capstan service unavailable) that must lead to
// redelivery rather than an answer.
func IsInfra(err error) bool {
	return errors.Is(err, secrets.ErrUnavailable) || errors.Is(err, tool.ErrUnavailable)
}

// Call runs t.Execute and turns a panic into an error naming the tool. It
// does not wait for anything else: the caller bounds it.
func Call(ctx context.Context, t *tool.Tool, args json.RawMessage, tc *tool.Context) (res tool.Result, err error) {
	defer func() {
		if p := recover(); p != nil {
			res, err = tool.Result{}, fmt.Errorf("tool %s panicked: %v", t.Name, p)
		}
	}()
	return t.Execute(ctx, args, tc)
}

// Outcome turns what Call returned into the tool's result: an error is an
// execution_failed result with its message, except an infrastructure fault
// (IsInfra), which is returned as the error; a failure without a valid
// code gets execution_failed, one without a message a message naming the
// tool.
func Outcome(name string, res tool.Result, err error) (tool.Result, error) {
	if err != nil {
		if IsInfra(err) {
			return tool.Result{}, err
		}
		return tool.Fail(tool.CodeExecutionFailed, err.Error()), nil
	}
	if !res.OK && !res.Code.Valid() {
		res.Code = tool.CodeExecutionFailed
	}
	if !res.OK && res.Error == "" {
		res.Error = "tool " + name + " failed without a message"
	}
	return res, nil
}

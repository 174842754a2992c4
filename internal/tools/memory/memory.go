// Package memory holds the built-in key-value memory tools of tools.md:
// kv_get, kv_set, kv_delete and kv_list. They declare storage {scope:
// session, kind: kv} and reach it only through tc.KV, so every tool of one
// session shares one store and sessions never see each other's keys.
//
// Shared rules:
//
//   - No accessor (tc.KV nil) → not_available "Storage capability not
//     configured for this personality."
//   - Keys (and the kv_list prefix) are 1 to 1024 bytes of UTF-8 (the prefix
//     may be empty). The schemas bound them to 1024 characters; a key that
//     fits the schema but not the byte limit is refused by the accessor with
//     "KV_KEY_INVALID: key must be 1 to 1024 bytes of UTF-8", which, like
//     every other accessor failure, is returned as a Go error: the worker
//     reports its message verbatim as execution_failed and records the denial.
//     A storage fault (the error matches tool.ErrUnavailable) is not an
//     answer: the worker hands the call back for redelivery.
//   - Keys and values are shown as they are, never escaped or quoted beyond
//     the quotes of the kv_get miss message.
package memory

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/capstanhq/capstan/tool"
)

// The tools' names.
const (
	GetName    = "kv_get"
	SetName    = "kv_set"
	DeleteName = "kv_delete"
	ListName   = "kv_list"
)

// Toolset is the toolset label of every tool of this package.
const Toolset = "memory"

// MsgNoKV is the not_available message of a call without a KV accessor.
const MsgNoKV = "Storage capability not configured for this personality."

// MsgNoKeys is kv_list's value when no key matches.
const MsgNoKeys = "(no keys)"

// MaxValueChars is the longest value kv_set accepts, in characters.
const MaxValueChars = 65536

// MaxTTLSeconds is the largest ttl_seconds kv_set accepts: ten years of 365
// days.
const MaxTTLSeconds = 10 * 365 * 24 * 60 * 60

// Tools returns kv_get, kv_set, kv_delete and kv_list, in that order.
func Tools() []tool.Tool {
	return []tool.Tool{Get(), Set(), Delete(), List()}
}

// capabilities declares storage {scope: session, kind: kv}.
func capabilities() tool.Capabilities {
	return tool.Capabilities{Storage: &tool.Storage{Scope: tool.ScopeSession, Kind: "kv"}}
}

const keyProperty = `"key": {"type": "string", "minLength": 1, "maxLength": 1024, "description": "the key (1 to 1024 bytes of UTF-8)"}`

const getSchema = `{
  "type": "object",
  "properties": {
    ` + keyProperty + `
  },
  "required": ["key"],
  "additionalProperties": false
}`

const setSchema = `{
  "type": "object",
  "properties": {
    ` + keyProperty + `,
    "value": {"type": "string", "maxLength": 65536, "description": "the value to store"},
    "ttl_seconds": {"type": "integer", "minimum": 1, "maximum": 315360000, "description": "forget the value after this many seconds (default: keep it)"}
  },
  "required": ["key", "value"],
  "additionalProperties": false
}`

const deleteSchema = getSchema

const listSchema = `{
  "type": "object",
  "properties": {
    "prefix": {"type": "string", "maxLength": 1024, "description": "list only keys that start with this (default: every key)"}
  },
  "additionalProperties": false
}`

type keyArgs struct {
	Key string `json:"key"`
}

type setArgs struct {
	Key        string   `json:"key"`
	Value      string   `json:"value"`
	TTLSeconds *float64 `json:"ttl_seconds"`
}

type listArgs struct {
	Prefix string `json:"prefix"`
}

// Get returns kv_get. A stored value → ok, the value as it is, Structured
// {"found": true}; no value (never set, deleted or expired) → ok
// `(no value for key "<k>")`, Structured {"found": false}.
func Get() tool.Tool {
	return tool.Tool{
		Name:         GetName,
		SideEffects:  tool.SideEffectsNone,
		Description:  "Reads a value this session stored with kv_set.",
		Schema:       json.RawMessage(getSchema),
		Toolset:      Toolset,
		Capabilities: capabilities(),
		Execute:      tool.Typed(executeGet),
	}
}

func executeGet(ctx context.Context, a keyArgs, tc *tool.Context) (tool.Result, error) {
	if tc.KV == nil {
		return noKV(), nil
	}
	v, found, err := tc.KV.Get(ctx, a.Key)
	if err != nil {
		return tool.Result{}, err
	}
	if !found {
		res := tool.OK(`(no value for key "` + a.Key + `")`)
		res.Structured = map[string]any{"found": false}
		return res, nil
	}
	res := tool.OK(string(v))
	res.Structured = map[string]any{"found": true}
	return res, nil
}

// Set returns kv_set: it stores value under key, replacing any earlier
// value, and answers "Stored <k>". ttl_seconds (1 to MaxTTLSeconds) makes
// the value expire; without it the value is kept until deleted.
func Set() tool.Tool {
	return tool.Tool{
		Name:         SetName,
		SideEffects:  tool.SideEffectsIdempotent,
		Description:  "Stores a value under a key for the rest of this session (or ttl_seconds), replacing any earlier value.",
		Schema:       json.RawMessage(setSchema),
		Toolset:      Toolset,
		Capabilities: capabilities(),
		Execute:      tool.Typed(executeSet),
	}
}

func executeSet(ctx context.Context, a setArgs, tc *tool.Context) (tool.Result, error) {
	if tc.KV == nil {
		return noKV(), nil
	}
	var ttl time.Duration
	if a.TTLSeconds != nil {
		s := *a.TTLSeconds
		if s != math.Trunc(s) || s < 1 || s > MaxTTLSeconds {
			return tool.InvalidArguments(fmt.Sprintf("args.ttl_seconds must be a whole number from 1 to %d", MaxTTLSeconds)), nil
		}
		ttl = time.Duration(s) * time.Second
	}
	if err := tc.KV.Set(ctx, a.Key, []byte(a.Value), ttl); err != nil {
		return tool.Result{}, err
	}
	return tool.OK("Stored " + a.Key), nil
}

// Delete returns kv_delete: it removes key and answers "Deleted <k>",
// also when the key had no value.
func Delete() tool.Tool {
	return tool.Tool{
		Name:         DeleteName,
		SideEffects:  tool.SideEffectsIdempotent,
		Description:  "Deletes a key this session stored with kv_set.",
		Schema:       json.RawMessage(deleteSchema),
		Toolset:      Toolset,
		Capabilities: capabilities(),
		Execute:      tool.Typed(executeDelete),
	}
}

func executeDelete(ctx context.Context, a keyArgs, tc *tool.Context) (tool.Result, error) {
	if tc.KV == nil {
		return noKV(), nil
	}
	if err := tc.KV.Delete(ctx, a.Key); err != nil {
		return tool.Result{}, err
	}
	return tool.OK("Deleted " + a.Key), nil
}

// List returns kv_list: the keys with a value that start with prefix (every
// key without one), sorted bytewise, one per line with no trailing newline;
// MsgNoKeys, "(no keys)", when none matches.
func List() tool.Tool {
	return tool.Tool{
		Name:         ListName,
		SideEffects:  tool.SideEffectsNone,
		Description:  "Lists the keys this session stored with kv_set, sorted, optionally only those starting with prefix.",
		Schema:       json.RawMessage(listSchema),
		Toolset:      Toolset,
		Capabilities: capabilities(),
		Execute:      tool.Typed(executeList),
	}
}

func executeList(ctx context.Context, a listArgs, tc *tool.Context) (tool.Result, error) {
	if tc.KV == nil {
		return noKV(), nil
	}
	keys, err := tc.KV.List(ctx, a.Prefix)
	if err != nil {
		return tool.Result{}, err
	}
	if len(keys) == 0 {
		return tool.OK(MsgNoKeys), nil
	}
	return tool.OK(strings.Join(keys, "\n")), nil
}

// noKV is the result of a call without a KV accessor.
func noKV() tool.Result { return tool.Fail(tool.CodeNotAvailable, MsgNoKV) }

package secrets

import (
	"context"
	"fmt"
	"os"
	"sort"

	"sigs.k8s.io/yaml"
)

// fileBackend serves secrets read once from a file.
type fileBackend struct {
	values map[string]string
}

// NewFile reads path, a JSON or YAML document that is a flat map from ref to
// string value, and returns a Backend serving it (the file is not read
// again). An empty document is an empty map. A document that is not such a
// map (a list, a nested map, a number or boolean value, a duplicate key) is an
// error that names the file and, where one is at fault, the ref, never a
// value.
func NewFile(path string) (Backend, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("secrets file %s: %w", path, err)
	}
	var doc any
	if err := yaml.UnmarshalStrict(data, &doc); err != nil {
		return nil, fmt.Errorf("secrets file %s: not valid JSON or YAML: %w", path, err)
	}
	values := make(map[string]string)
	switch m := doc.(type) {
	case nil:
	case map[string]any:
		refs := make([]string, 0, len(m))
		for ref := range m {
			refs = append(refs, ref)
		}
		sort.Strings(refs) // report the same bad ref on every start
		for _, ref := range refs {
			s, ok := m[ref].(string)
			if !ok {
				return nil, fmt.Errorf("secrets file %s: value of %q is not a string (want a flat map of ref to string; quote numbers and booleans)", path, ref)
			}
			values[ref] = s
		}
	default:
		return nil, fmt.Errorf("secrets file %s: want a flat map of ref to string value", path)
	}
	return &fileBackend{values: values}, nil
}

// Resolve returns the value of ref, or ErrNotFound when it has none or an
// empty one.
func (f *fileBackend) Resolve(ctx context.Context, ref string) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	v := f.values[ref]
	if v == "" {
		return "", ErrNotFound
	}
	return v, nil
}

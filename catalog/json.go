package catalog

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// ErrJSONLimit is wrapped by errors for JSON that is too large or too deep
// to be decoded.
var ErrJSONLimit = errors.New("catalog: json exceeds limits")

// checkJSONShape refuses JSON larger than maxBytes or nested deeper than
// maxDepth without decoding it. It only counts brackets outside strings;
// well-formedness is left to the decoder that runs afterwards.
func checkJSONShape(b []byte, maxBytes, maxDepth int) error {
	if len(b) > maxBytes {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrJSONLimit, len(b), maxBytes)
	}
	depth, inString, escaped := 0, false, false
	for i, c := range b {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			depth++
			if depth > maxDepth {
				return fmt.Errorf("%w: nesting deeper than %d at byte %d", ErrJSONLimit, maxDepth, i)
			}
		case c == '}' || c == ']':
			depth--
		}
	}
	return nil
}

// decodeJSON bounds b, then decodes it with numbers kept exact
// (json.Number), as the schema validator expects.
func decodeJSON(b []byte, maxBytes, maxDepth int) (any, error) {
	if err := checkJSONShape(b, maxBytes, maxDepth); err != nil {
		return nil, err
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("catalog: invalid json: %w", err)
	}
	return v, nil
}

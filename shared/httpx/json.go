package httpx

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/videngage/engagement/shared/errs"
)

// MaxBodyBytes is the largest request body accepted (413 above it).
const MaxBodyBytes = 64 << 10

// WriteJSON writes v as JSON with the status.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	if v != nil {
		_ = json.NewEncoder(w).Encode(v)
	}
}

// DecodeJSON decodes the request body into v: one JSON object, no unknown
// fields, at most MaxBodyBytes. The body is read as JSON whatever its
// Content-Type says (curl -d sends a form type).
func DecodeJSON(w http.ResponseWriter, r *http.Request, v any) error {
	body := bufio.NewReader(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	// encoding/json decodes null into a struct as "nothing sent": refuse
	// every body that does not start as an object.
	if c, err := firstNonSpace(body); err == nil && c != '{' {
		return InvalidArgument(errs.InvalidJSON, "the body must be a JSON object")
	}
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeError(err)
	}
	if err := dec.Decode(&struct{}{}); !errors.Is(err, io.EOF) {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return decodeError(err)
		}
		return InvalidArgument(errs.InvalidJSON, "the body must hold exactly one JSON object")
	}
	return nil
}

// firstNonSpace peeks at the first byte of r that is not JSON whitespace.
func firstNonSpace(r *bufio.Reader) (byte, error) {
	for {
		c, err := r.ReadByte()
		if err != nil {
			return 0, err
		}
		if c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			return c, r.UnreadByte()
		}
	}
}

func decodeError(err error) error {
	var (
		tooLarge  *http.MaxBytesError
		syntax    *json.SyntaxError
		typeError *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &tooLarge):
		return TooLarge(MaxBodyBytes)
	case errors.Is(err, io.EOF):
		return InvalidArgument(errs.InvalidJSON, "the body is empty; send a JSON object")
	case errors.As(err, &syntax), errors.Is(err, io.ErrUnexpectedEOF):
		return InvalidArgument(errs.InvalidJSON, "the body is not valid JSON")
	case errors.As(err, &typeError):
		if typeError.Field != "" {
			return InvalidField(errs.WrongFieldType, typeError.Field, "field %q must be a JSON %s", typeError.Field, jsonKind(typeError.Type.Kind().String()))
		}
		return InvalidArgument(errs.InvalidJSON, "the body must be a JSON object")
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		quoted := strings.TrimPrefix(err.Error(), "json: unknown field ")
		field, uerr := strconv.Unquote(quoted)
		if uerr != nil {
			field = quoted
		}
		return InvalidField(errs.UnknownField, field, "unknown field %s", quoted)
	}
	return InvalidArgument(errs.InvalidJSON, "the body is not valid JSON")
}

func jsonKind(goKind string) string {
	switch goKind {
	case "string":
		return "string"
	case "bool":
		return "boolean"
	case "slice", "array":
		return "array"
	case "struct", "map", "ptr":
		return "object"
	}
	return "number"
}

package httpx

import (
	"regexp"
	"strconv"
	"strings"

	"github.com/videngage/engagement/shared/errs"
)

var idPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// ValidID reports whether s is a valid video or comment id.
func ValidID(s string) bool { return idPattern.MatchString(s) }

// ValidateID returns a 400 naming the parameter when s is not a valid id.
func ValidateID(name, s string) error {
	if !ValidID(s) {
		return InvalidField(errs.InvalidID, name, "%s must match ^[A-Za-z0-9_-]{1,64}$", name)
	}
	return nil
}

// ValidateIDIn returns a 400 naming the list when s, one of its ids, is not
// a valid id.
func ValidateIDIn(list, s string) error {
	if !ValidID(s) {
		return InvalidField(errs.InvalidID, list, "every id in %s must match ^[A-Za-z0-9_-]{1,64}$", list)
	}
	return nil
}

// ParseIDs parses the comma-separated ids query value: 1 to max valid ids,
// duplicates collapsed, first-seen order kept.
func ParseIDs(q string, max int) ([]string, error) {
	if q == "" {
		return nil, InvalidField(errs.MissingField, "ids", "ids is required: 1 to %d comma-separated ids", max)
	}
	parts := strings.Split(q, ",")
	seen := make(map[string]bool, len(parts))
	ids := make([]string, 0, len(parts))
	for _, p := range parts {
		if err := ValidateIDIn("ids", p); err != nil {
			return nil, err
		}
		if !seen[p] {
			seen[p] = true
			ids = append(ids, p)
		}
	}
	if len(ids) > max {
		return nil, InvalidField(errs.InvalidValue, "ids", "ids holds %d distinct ids; at most %d are allowed", len(ids), max).
			With("maxIds", strconv.Itoa(max))
	}
	return ids, nil
}

package docscheck

import (
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/videngage/engagement/shared/config"
)

// envTags are the variables config.Config reads, with the default each
// tag states ("" for none), found by walking its sub-configs.
func envTags(t reflect.Type) map[string]string {
	out := map[string]string{}
	for i := range t.NumField() {
		f := t.Field(i)
		if tag, ok := f.Tag.Lookup("env"); ok {
			name, opts, _ := strings.Cut(tag, ",")
			def := ""
			for _, o := range strings.Split(opts, ",") {
				if v, ok := strings.CutPrefix(strings.TrimSpace(o), "default="); ok {
					def = v
				}
			}
			out[strings.TrimSpace(name)] = def
			continue
		}
		if f.Type.Kind() == reflect.Struct {
			for k, v := range envTags(f.Type) {
				out[k] = v
			}
		}
	}
	return out
}

// TestConfigurationPage: every variable shared/config reads has a row in
// docs/configuration.md, and a numeric or duration default is the one the
// row states, so the page cannot drift from the tags, the one place each
// default is stated.
func TestConfigurationPage(t *testing.T) {
	b, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	var rows []string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "| `") {
			rows = append(rows, line)
		}
	}
	tags := envTags(reflect.TypeFor[config.Config]())
	if len(tags) < 40 {
		t.Fatalf("found %d variables in config.Config: the walk is broken", len(tags))
	}
	for name, def := range tags {
		var row string
		for _, r := range rows {
			if cells := strings.Split(r, "|"); len(cells) > 2 && strings.Contains(cells[1], "`"+name+"`") {
				row = r
				break
			}
		}
		if row == "" {
			t.Errorf("%s: no row in docs/configuration.md", name)
			continue
		}
		if !numeric(def) {
			continue
		}
		if cells := strings.Split(row, "|"); !containsWord(cells[2], def) {
			t.Errorf("%s: the page's default is %q, the code's %s", name, strings.TrimSpace(cells[2]), def)
		}
	}
}

func numeric(s string) bool {
	if _, err := strconv.ParseFloat(s, 64); err == nil {
		return true
	}
	_, err := time.ParseDuration(s)
	return err == nil
}

// containsWord reports whether w occurs in s, not as part of a longer
// number or word.
func containsWord(s, w string) bool {
	for f := range strings.FieldsFuncSeq(s, func(r rune) bool { return r == ' ' || r == '(' || r == ')' || r == '`' || r == ',' }) {
		if f == w {
			return true
		}
	}
	return false
}

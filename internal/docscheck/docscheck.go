// Package docscheck finds broken relative links in the repository's Markdown
// files: a link to a file that does not exist, to a heading that a Markdown
// file does not have, or to a path outside the repository.
package docscheck

import (
	"bufio"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"unicode"
)

// Problem is one broken link.
type Problem struct {
	File   string // the Markdown file, relative to the root
	Line   int
	Target string
	Reason string
}

func (p Problem) String() string {
	return fmt.Sprintf("%s:%d: %s: %s", p.File, p.Line, p.Target, p.Reason)
}

var (
	// inline matches [text](target) and ![alt](target), with an optional title.
	inline = regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	// definition matches a reference definition: [label]: target
	definition = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$`)
	codeSpan   = regexp.MustCompile("`+[^`]*`+")
	scheme     = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)
	heading    = regexp.MustCompile(`^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$`)
)

// Check reads every Markdown file under root (skipping hidden directories and
// testdata) and returns the broken relative links, in file order.
func Check(root string) ([]Problem, error) {
	root, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	var files []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(d.Name(), ".md") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	anchors := map[string]map[string]bool{}
	var problems []Problem
	for _, f := range files {
		ps, err := checkFile(root, f, anchors)
		if err != nil {
			return nil, err
		}
		problems = append(problems, ps...)
	}
	return problems, nil
}

type link struct {
	line   int
	target string
}

func checkFile(root, file string, anchors map[string]map[string]bool) ([]Problem, error) {
	links, err := linksOf(file)
	if err != nil {
		return nil, err
	}
	rel, _ := filepath.Rel(root, file)
	var problems []Problem
	bad := func(l link, reason string) {
		problems = append(problems, Problem{File: filepath.ToSlash(rel), Line: l.line, Target: l.target, Reason: reason})
	}
	for _, l := range links {
		if scheme.MatchString(l.target) || strings.HasPrefix(l.target, "//") {
			continue // an absolute URL: not a file of the repository
		}
		pathPart, fragment, _ := strings.Cut(l.target, "#")
		p, err := url.PathUnescape(pathPart)
		if err != nil {
			bad(l, "the path does not unescape")
			continue
		}
		target := file
		if p != "" {
			if strings.HasPrefix(p, "/") {
				target = filepath.Join(root, filepath.FromSlash(p))
			} else {
				target = filepath.Join(filepath.Dir(file), filepath.FromSlash(p))
			}
		}
		if r, err := filepath.Rel(root, target); err != nil || r == ".." || strings.HasPrefix(r, ".."+string(filepath.Separator)) {
			bad(l, "points outside the repository")
			continue
		}
		info, err := os.Stat(target)
		if err != nil {
			bad(l, "no such file or directory")
			continue
		}
		if fragment == "" || info.IsDir() || !strings.HasSuffix(target, ".md") {
			continue
		}
		a, ok := anchors[target]
		if !ok {
			if a, err = anchorsOf(target); err != nil {
				return nil, err
			}
			anchors[target] = a
		}
		if !a[strings.ToLower(fragment)] {
			bad(l, "no heading with this anchor")
		}
	}
	return problems, nil
}

// linksOf returns the link targets of a Markdown file outside code blocks
// and code spans.
func linksOf(file string) ([]link, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var links []link
	fence := ""
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; s.Scan(); n++ {
		line := s.Text()
		if fence != "" {
			if strings.HasPrefix(strings.TrimSpace(line), fence) {
				fence = ""
			}
			continue
		}
		if t := strings.TrimSpace(line); strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~") {
			fence = t[:3]
			continue
		}
		if strings.HasPrefix(line, "    ") || strings.HasPrefix(line, "\t") {
			continue // an indented code block (or a continuation line: no link there is lost in this repository)
		}
		line = codeSpan.ReplaceAllString(line, "")
		for _, m := range inline.FindAllStringSubmatch(line, -1) {
			links = append(links, link{n, m[1]})
		}
		if m := definition.FindStringSubmatch(line); m != nil {
			links = append(links, link{n, m[1]})
		}
	}
	return links, s.Err()
}

// anchorsOf returns the anchors GitHub gives the headings of a Markdown file.
func anchorsOf(file string) (map[string]bool, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	anchors := map[string]bool{}
	seen := map[string]int{}
	fence := ""
	for _, line := range strings.Split(string(b), "\n") {
		t := strings.TrimSpace(line)
		if fence != "" {
			if strings.HasPrefix(t, fence) {
				fence = ""
			}
			continue
		}
		if strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~") {
			fence = t[:3]
			continue
		}
		m := heading.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		slug := Slug(m[1])
		if k := seen[slug]; k > 0 {
			anchors[fmt.Sprintf("%s-%d", slug, k)] = true
		} else {
			anchors[slug] = true
		}
		seen[slug]++
	}
	return anchors, nil
}

// Slug is the anchor GitHub gives a heading: lower case, letters, digits,
// hyphens and underscores kept, spaces turned into hyphens, the rest dropped.
func Slug(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

package node

import (
	"fmt"
	"strings"
)

// YAML syntax errors from gopkg.in/yaml.v3 often name the wrong line: a
// parser error names the line where the enclosing mapping, list or flow
// collection began, counted from zero, and never a key. syntaxLocation
// reads the file's lines the way a person would, by indentation, to find
// the line at fault and the key on it.

// yamlLine is one line of a node file, as syntaxLocation sees it.
type yamlLine struct {
	n      int    // 1-based
	indent int    // leading spaces
	tab    bool   // a tab in the leading white space
	text   string // without indentation and comment
}

// frame is a level of the block structure: a key, or a list item.
type frame struct {
	line   int
	indent int
	key    any  // string for a key, int for a list item
	scalar bool // the key has its value on its line: it takes no children
	child  int  // the indentation of its children, once one is seen; -1 before
	items  int  // list items seen at child indentation
	keys   int  // keys seen at child indentation
}

// syntaxLocation returns the line a YAML syntax error is at, the key path
// of that line's key (nil if none), and a hint in the file's terms. When
// it finds nothing wrong it returns line 0 and the key path of line
// near, the line the parser named.
func syntaxLocation(data []byte, near int) (line int, path []any, hint string) {
	var nearPath []any
	var stack []*frame
	pathOf := func(extra ...any) []any {
		var p []any
		for _, f := range stack {
			if f.key != nil {
				p = append(p, f.key)
			}
		}
		return append(p, extra...)
	}
	depth, openLine, openIndent := 0, 0, 0
	var openPath []any
	blockScalar := -1 // the indentation of a key whose block scalar (| or >) runs on
	for _, l := range splitYAML(data) {
		if l.text == "" {
			continue
		}
		if blockScalar >= 0 {
			if l.indent > blockScalar {
				continue
			}
			blockScalar = -1
		}
		if depth > 0 {
			if l.indent <= openIndent && looksLikeKey(l.text) {
				return openLine, openPath, "this [ or { is never closed"
			}
			depth += flowDelta(l.text)
			continue
		}
		for len(stack) > 0 && stack[len(stack)-1].indent > l.indent {
			stack = stack[:len(stack)-1]
		}
		if l.tab {
			return l.n, pathOf(keyOf(l.text)...), "a tab in the indentation: YAML indents with spaces"
		}
		// l is a sibling of the top frame, or its child.
		if len(stack) > 0 {
			top := stack[len(stack)-1]
			switch {
			case top.indent == l.indent && strings.HasPrefix(l.text, "-") && !top.scalar && top.child < 0:
				// key:\n- item: a list at its key's indentation.
			case top.indent == l.indent:
				// A list item after keys, or a key after list items, at
				// one indentation is a sibling only under a parent key.
				stack = stack[:len(stack)-1]
			case top.scalar:
				stack = stack[:len(stack)-1]
				return l.n, pathOf(keyOf(l.text)...), fmt.Sprintf("this line is indented under %s, which has its value on line %d already; indent it as %s is",
					top.key, top.line, top.key)
			}
		}
		var parent *frame
		if len(stack) > 0 {
			parent = stack[len(stack)-1]
			if parent.child < 0 {
				parent.child = l.indent
			} else if parent.child != l.indent {
				return l.n, pathOf(keyOf(l.text)...), fmt.Sprintf("indented %s where the rest of %s is indented %d", spaces(l.indent), keyPath(pathOf()), parent.child)
			}
		} else if l.indent != 0 {
			return l.n, pathOf(keyOf(l.text)...), "the top-level keys start at the first column"
		}
		if l.n == near {
			nearPath = pathOf(keyOf(l.text)...)
		}
		if parent != nil {
			item := strings.HasPrefix(l.text, "- ") || l.text == "-"
			switch {
			case item && parent.keys > 0:
				return l.n, pathOf(), fmt.Sprintf("a list item among the keys of %s", keyPath(pathOf()))
			case !item && parent.items > 0:
				return l.n, pathOf(keyOf(l.text)...), fmt.Sprintf("a key among the list items of %s", keyPath(pathOf()))
			case !item:
				parent.keys++
			}
		}
		text, indent := l.text, l.indent
		for strings.HasPrefix(text, "- ") || text == "-" {
			i := 0
			if parent != nil {
				i = parent.items
				parent.items++
			}
			f := &frame{line: l.n, indent: indent, key: i, child: -1}
			stack = append(stack, f)
			rest := strings.TrimLeft(strings.TrimPrefix(text, "-"), " ")
			indent += len(text) - len(rest)
			text = rest
			if text != "" {
				f.child = indent
			}
			parent = f
		}
		if text == "" {
			continue
		}
		k, v, ok := splitKey(text)
		if !ok {
			depth += flowDelta(text)
			continue
		}
		f := &frame{line: l.n, indent: indent, key: k, child: -1, scalar: v != ""}
		switch {
		case strings.HasPrefix(v, "|") || strings.HasPrefix(v, ">"):
			f.scalar, blockScalar = false, indent
		case strings.HasPrefix(v, "[") || strings.HasPrefix(v, "{"):
			if d := flowDelta(v); d > 0 {
				depth, openLine, openIndent = d, l.n, l.indent
				openPath = pathOf(k)
			}
		}
		stack = append(stack, f)
	}
	if depth > 0 {
		return openLine, openPath, "this [ or { is never closed"
	}
	return 0, nearPath, ""
}

// splitYAML splits a file into lines, with comments removed.
func splitYAML(data []byte) []yamlLine {
	var out []yamlLine
	for i, s := range strings.Split(string(data), "\n") {
		s = strings.TrimRight(s, "\r")
		ws := len(s) - len(strings.TrimLeft(s, " \t"))
		l := yamlLine{n: i + 1, indent: ws, tab: strings.Contains(s[:ws], "\t")}
		l.text = strings.TrimRight(stripComment(s[ws:]), " \t")
		if strings.HasPrefix(l.text, "---") || strings.HasPrefix(l.text, "...") {
			l.text = ""
		}
		out = append(out, l)
	}
	return out
}

// stripComment drops a # comment that is outside quotes.
func stripComment(s string) string {
	var quote byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '"' || c == '\'':
			quote = c
		case c == '#' && (i == 0 || s[i-1] == ' ' || s[i-1] == '\t'):
			return s[:i]
		}
	}
	return s
}

// flowDelta counts the brackets a line opens less those it closes,
// outside quotes.
func flowDelta(s string) int {
	d := 0
	var quote byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '"' || c == '\'':
			quote = c
		case c == '[' || c == '{':
			d++
		case c == ']' || c == '}':
			d--
		}
	}
	return d
}

// splitKey splits "key: value" or "key:"; ok is false for a line that is
// not a key.
func splitKey(s string) (key, value string, ok bool) {
	if strings.HasPrefix(s, "\"") || strings.HasPrefix(s, "'") || strings.HasPrefix(s, "[") || strings.HasPrefix(s, "{") {
		return "", "", false
	}
	if k, ok := strings.CutSuffix(s, ":"); ok && !strings.Contains(k, ": ") {
		return k, "", true
	}
	k, v, ok := strings.Cut(s, ": ")
	if !ok {
		return "", "", false
	}
	return k, strings.TrimSpace(v), true
}

func looksLikeKey(s string) bool {
	_, _, ok := splitKey(strings.TrimPrefix(s, "- "))
	return ok
}

// keyOf returns the key a line begins with, as a path element.
func keyOf(s string) []any {
	s = strings.TrimLeft(strings.TrimLeft(s, "- "), " ")
	if k, _, ok := splitKey(s); ok {
		return []any{k}
	}
	return nil
}

func spaces(n int) string {
	if n == 1 {
		return "1 space"
	}
	return fmt.Sprintf("%d spaces", n)
}

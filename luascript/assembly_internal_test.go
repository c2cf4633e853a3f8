package luascript

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/sluicehq/sluice/valkeytest"
)

// algorithms are the algorithm files of the scripts.
var algorithms = []*algorithm{fixedWindowAlg, slidingLogAlg, slidingWindowAlg, tokenBucketAlg, gcraAlg, calendarAlg, inFlightAlg}

// TestAssembly checks the contract of the scripts' assembly on the
// pieces of every script (each algorithm with each ending): no top-level
// local of one piece is declared again by another (which would shadow it
// for every later piece, by position), and no piece assigns at top level a
// name it does not declare itself (which would change what an earlier
// piece runs, or write a global). The algorithm files' own locals sit in
// their function, out of the others' reach.
func TestAssembly(t *testing.T) {
	for _, a := range algorithms {
		for _, ending := range []struct{ name, src string }{{"one.lua", oneLua}, {"cross.lua", crossLua}} {
			t.Run(a.name+"/"+ending.name, func(t *testing.T) {
				if err := checkPieces(pieces(a, ending.src)); err != nil {
					t.Error(err)
				}
			})
		}
	}
}

// TestAssemblyCheckFails: checkPieces refuses the two ways the scripts
// once relied on position, a piece redeclaring an earlier one's local
// (calendar.lua's decide after fixed_window.lua's) and a piece assigning
// an earlier one's (cross.lua's flush), and a global assignment.
func TestAssemblyCheckFails(t *testing.T) {
	for _, ps := range [][]piece{
		{{"fixed", "local function decide(k)\n  return 1\nend\n"}, {"calendar", "local function decide(k) return 2 end\n"}},
		{{"alg", "local states = {}\nlocal function flush() end\n"}, {"cross", "local f = flush\nflush = function()\n  f()\nend\n"}},
		{{"a", "local x = 1\n"}, {"b", "if x then\n  y = 2\nend\nz, w = 1, 2\n"}},
		{{"a", "local t = {}\n"}, {"b", "t.field = 1\n"}},
	} {
		if err := checkPieces(ps); err == nil {
			t.Errorf("%q: no error", ps)
		}
	}
	// Nested locals and assignments, strings and comments are not top-level.
	ok := []piece{
		{"a", "local x = 1 -- local y = 2\nlocal function f()\n  local x = 'local y = 3'\n  x = 4\nend\n"},
		{"b", "local s = \"x = 5\"\nfor i = 1, 2 do\n  local x = i\nend\nwhile false do x2 = 1 end\nlocal t = {\n  x = 6,\n}\n"},
	}
	if err := checkPieces(ok); err != nil {
		t.Error(err)
	}
}

// TestAlgorithmsProvide runs every algorithm file, as the assembly
// wraps it, on a real Valkey, and checks that its table holds what the
// assembly binds: decide and flush functions and a boolean readsFirst.
func TestAlgorithmsProvide(t *testing.T) {
	c := valkeytest.Shared(t).Client(t)
	for _, a := range algorithms {
		t.Run(a.name, func(t *testing.T) {
			ps := pieces(a, "")
			var b strings.Builder
			for _, p := range ps {
				if p.name == "binding" {
					break
				}
				b.WriteString(p.src)
			}
			b.WriteString("return { type(" + a.name + ".decide), type(" + a.name + ".flush), type(" + a.name + ".readsFirst) }\n")
			got, err := c.Do(context.Background(), c.B().Eval().Script(b.String()).Numkeys(0).Build()).AsStrSlice()
			if err != nil {
				t.Fatal(err)
			}
			if want := []string{"function", "function", "boolean"}; !slices.Equal(got, want) {
				t.Errorf("types of %v: %v, want %v", provides, got, want)
			}
		})
	}
}

// checkPieces returns an error when a piece declares a top-level local
// another declared, or assigns at top level a name it did not declare.
func checkPieces(ps []piece) error {
	owner := map[string]string{}
	var errs []string
	for _, p := range ps {
		decl, assigned, err := topLevel(p.src)
		if err != nil {
			return fmt.Errorf("%s: %v", p.name, err)
		}
		for _, n := range decl {
			if o, ok := owner[n]; ok {
				errs = append(errs, fmt.Sprintf("%s declares %s, already %s's", p.name, n, o))
			}
			owner[n] = p.name
		}
		for _, n := range assigned {
			if o := owner[n]; o != p.name {
				if o == "" {
					o = "a global"
				}
				errs = append(errs, fmt.Sprintf("%s assigns %s (%s) at top level", p.name, n, o))
			}
		}
	}
	if errs != nil {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

// topLevel returns the names a Lua chunk declares as locals, and those it
// assigns, at its top level (outside every block and bracket), in order.
// A statement is read from the start of a line: the scripts put one
// top-level statement on a line. It refuses long brackets, which it does
// not read.
func topLevel(src string) (decl, assigned []string, err error) {
	if strings.Contains(src, "[[") || strings.Contains(src, "--[") {
		return nil, nil, fmt.Errorf("long brackets are not read")
	}
	depth, brackets, loops := 0, 0, 0
	for _, line := range strings.Split(src, "\n") {
		toks := tokens(line)
		if depth == 0 && brackets == 0 && len(toks) > 0 {
			switch {
			case toks[0] == "local":
				for _, tk := range toks[1:] {
					if tk == "=" {
						break
					}
					if tk != "function" && tk != "," && isName(tk) {
						decl = append(decl, tk)
					}
					if tk == "(" {
						break
					}
				}
			case toks[0] == "function" && len(toks) > 1:
				assigned = append(assigned, strings.SplitN(toks[1], ".", 2)[0])
			case isName(toks[0]) && !keyword[toks[0]]:
				// a, b.c, d[e] = ...: the names before a lone = at bracket depth 0.
				var names []string
				lhs, inner := true, 0
				for i, tk := range toks {
					switch tk {
					case "(", "{", "[":
						inner++
					case ")", "}", "]":
						inner--
					}
					if tk == "=" && inner == 0 {
						for _, n := range names {
							assigned = append(assigned, strings.SplitN(n, ".", 2)[0])
						}
						break
					}
					if inner == 0 && isName(tk) && !keyword[tk] && (i == 0 || toks[i-1] == ",") {
						names = append(names, tk)
					} else if inner == 0 && tk != "," && tk != "." && !isName(tk) && tk != "]" {
						lhs = false
					}
					if !lhs {
						break
					}
				}
			}
		}
		for _, tk := range toks {
			switch tk {
			case "function", "if", "repeat":
				depth++
			case "while", "for":
				depth++
				loops++
			case "do":
				if loops > 0 {
					loops--
				} else {
					depth++
				}
			case "end", "until":
				depth--
			case "(", "{", "[":
				brackets++
			case ")", "}", "]":
				brackets--
			}
		}
		if depth < 0 || brackets < 0 {
			return nil, nil, fmt.Errorf("unbalanced at %q", line)
		}
	}
	if depth != 0 || brackets != 0 {
		return nil, nil, fmt.Errorf("unbalanced: %d blocks, %d brackets open at the end", depth, brackets)
	}
	return decl, assigned, nil
}

var keyword = map[string]bool{
	"and": true, "break": true, "do": true, "else": true, "elseif": true, "end": true, "false": true,
	"for": true, "function": true, "if": true, "in": true, "local": true, "nil": true, "not": true,
	"or": true, "repeat": true, "return": true, "then": true, "true": true, "until": true, "while": true,
}

func isName(s string) bool {
	return s != "" && (unicode.IsLetter(rune(s[0])) || s[0] == '_')
}

// tokens splits a line of Lua into names (with their dots: a.b), numbers
// and punctuation, without its comment and with each string as "".
func tokens(line string) []string {
	var out []string
	for i := 0; i < len(line); {
		c := line[i]
		switch {
		case c == ' ' || c == '\t' || c == '\r':
			i++
		case strings.HasPrefix(line[i:], "--"):
			return out
		case c == '\'' || c == '"':
			j := i + 1
			for j < len(line) && line[j] != c {
				if line[j] == '\\' {
					j++
				}
				j++
			}
			out = append(out, `""`)
			i = j + 1
		case isName(line[i:i+1]) || (c >= '0' && c <= '9'):
			j := i
			for j < len(line) && (line[j] == '_' || line[j] == '.' && j+1 < len(line) && line[j+1] != '.' || unicode.IsLetter(rune(line[j])) || unicode.IsDigit(rune(line[j]))) {
				j++
			}
			out = append(out, line[i:j])
			i = j
		case strings.HasPrefix(line[i:], "==") || strings.HasPrefix(line[i:], "~=") || strings.HasPrefix(line[i:], "<=") ||
			strings.HasPrefix(line[i:], ">=") || strings.HasPrefix(line[i:], ".."):
			out = append(out, line[i:i+2])
			i += 2
		default:
			out = append(out, line[i:i+1])
			i++
		}
	}
	return out
}

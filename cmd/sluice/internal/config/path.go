package config

import (
	"fmt"
	"path"
	"strings"
)

// CleanPath returns the path of a request URI as forward_auth routes match
// it, so that a spelling a backend serves as /login is matched as /login:
//
//  1. the query and fragment are dropped (from the first ? or #, as
//     written: an escaped %3F is part of the path);
//  2. of an absolute URI (http://host/path, which does not start with /)
//     the path is kept;
//  3. every valid percent-escape is decoded, once (%4C is L, %2F is /,
//     %25 is %); an invalid one (%zz, a lone %) stays as written;
//  4. a control character (0x00-0x1F or 0x7F, sent raw or escaped as %00)
//     is an error: backends disagree on it (some cut the path there, some
//     refuse it), so the request cannot be matched;
//  5. a backslash is a slash (as Windows and some Java servers read it);
//  6. path parameters are dropped: from each ; to the end of its segment
//     (/login;jsessionid=1 is /login, as Tomcat and Spring read it);
//  7. repeated slashes are merged, . and .. segments resolved (.. never
//     above the root), a trailing slash dropped, and the path starts
//     with /.
//
// Upper and lower case are left as they are; ForwardAuth.MatchPath folds
// them unless path_case says sensitive.
func CleanPath(uri string) (string, error) {
	uri = uriPath(uri)
	b := make([]byte, 0, len(uri)+1)
	b = append(b, '/')
	param := false // inside a ;parameter: dropped up to the next /
	for i := 0; i < len(uri); i++ {
		c, n := decodeByte(uri, i)
		i += n
		switch {
		case c < 0x20 || c == 0x7f:
			return "", fmt.Errorf("the request path holds the control character %#02x, which backends read in different ways", c)
		case c == '\\' || c == '/':
			param = false
			b = append(b, '/')
		case c == ';':
			param = true
		case !param:
			b = append(b, c)
		}
	}
	return path.Clean(string(b)), nil
}

// uriPath is the path part of a request URI, as written: without the
// query and fragment, and, of an absolute URI, without the scheme and
// host ("/" when it has no path).
func uriPath(uri string) string {
	if i := strings.IndexAny(uri, "?#"); i >= 0 {
		uri = uri[:i]
	}
	if strings.HasPrefix(uri, "/") {
		return uri
	}
	i := strings.Index(uri, "://")
	if i < 0 {
		return uri
	}
	rest := uri[i+3:]
	if j := strings.IndexByte(rest, '/'); j >= 0 {
		return rest[j:]
	}
	return "/"
}

// decodeByte is the byte of uri at i, decoded when a valid percent-escape
// starts there; n is the further bytes the escape took (2, else 0).
func decodeByte(uri string, i int) (c byte, n int) {
	if uri[i] == '%' && i+2 < len(uri) && isHex(uri[i+1]) && isHex(uri[i+2]) {
		return unhex(uri[i+1])<<4 | unhex(uri[i+2]), 2
	}
	return uri[i], 0
}

// isHex reports whether c is a hexadecimal digit, of either case.
func isHex(c byte) bool {
	return strings.IndexByte("0123456789abcdefABCDEF", c) >= 0
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}

// MatchPath returns the path of a request URI as the routes' path_prefix
// is compared with it: CleanPath's, lower-cased unless path_case is
// sensitive (ASCII and Unicode letters alike, so /LOGIN and /Login are
// /login).
func (fa *ForwardAuth) MatchPath(uri string) (string, error) {
	p, err := CleanPath(uri)
	if err != nil || fa.PathCaseSensitive {
		return p, err
	}
	return strings.ToLower(p), nil
}

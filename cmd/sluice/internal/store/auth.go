package store

import (
	"errors"
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
	"github.com/valkey-io/valkey-go"
)

// AuthRefusal returns the code of Valkey's refusal to authenticate found
// in err, "NOAUTH" (a password is required and none was sent) or
// "WRONGPASS" (the username or password is wrong), and "" for any other
// error.
func AuthRefusal(err error) string {
	if err == nil {
		return ""
	}
	var ve *valkey.ValkeyError
	msg := err.Error()
	if errors.As(err, &ve) {
		msg = ve.Error()
	}
	for _, code := range []string{"NOAUTH", "WRONGPASS"} {
		if strings.HasPrefix(msg, code+" ") || strings.Contains(msg, " "+code+" ") || strings.Contains(msg, ": "+code+" ") {
			return code
		}
	}
	return ""
}

// AuthError is Valkey's refusal to authenticate, with the settings that
// fix it.
type AuthError struct {
	Code string // NOAUTH or WRONGPASS
	Fix  string
	Err  error
}

func (e *AuthError) Error() string {
	what := "requires a password and none was sent"
	if e.Code == "WRONGPASS" {
		what = "refused the username or password"
	}
	return fmt.Sprintf("valkey %s (%s): fix %s (%v)", what, e.Code, e.Fix, e.Err)
}

func (e *AuthError) Unwrap() error { return e.Err }

// ExplainAuth returns err unchanged unless it is a refusal to
// authenticate (AuthRefusal): then an *AuthError naming the settings of v
// (the configuration's valkey section) that fix it.
func ExplainAuth(err error, v *config.Valkey) error {
	code := AuthRefusal(err)
	if code == "" {
		return err
	}
	var fix string
	switch {
	case v == nil:
		fix = "valkey.password_env or valkey.password_file (and valkey.username for an ACL user) in the configuration file"
	case code == "NOAUTH" || v.PasswordEnv == "" && v.PasswordFile == "":
		fix = "the password: set valkey.password_env (the name of an environment variable holding it) or valkey.password_file in the configuration file, and valkey.username for an ACL user"
	default:
		user := "valkey.username (not set: the default user)"
		if v.Username != "" {
			user = fmt.Sprintf("valkey.username (%q)", v.Username)
		}
		src := fmt.Sprintf("the environment variable %s (valkey.password_env)", v.PasswordEnv)
		if v.PasswordFile != "" {
			src = fmt.Sprintf("the file %s (valkey.password_file)", v.PasswordFile)
		}
		fix = "the password in " + src + ", or " + user
	}
	if v != nil && v.Sentinel != nil {
		fix += "; if the Sentinels refused, valkey.sentinel.password_env or valkey.sentinel.password_file, and valkey.sentinel.username"
	}
	return &AuthError{Code: code, Fix: fix, Err: err}
}

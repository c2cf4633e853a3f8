package config

import (
	"fmt"
	"io"
	"os"
	"strings"
)

// Reading secrets (Valkey password, admin token) from the environment or a
// file: the configuration names where they are, never holds them.

// Password reads the password from the environment variable or file; env
// is the environment to look in (nil: the process environment).
func (v *Valkey) Password(env func(string) (string, bool)) (string, error) {
	switch {
	case v.PasswordEnv != "":
		if env == nil {
			env = os.LookupEnv
		}
		p, ok := env(v.PasswordEnv)
		if !ok {
			return "", fmt.Errorf("valkey.password_env: environment variable %s is not set", v.PasswordEnv)
		}
		return p, nil
	case v.PasswordFile != "":
		b, err := readSmallFile(v.PasswordFile)
		if err != nil {
			return "", fmt.Errorf("valkey.password_file: %w", err)
		}
		return strings.TrimRight(string(b), "\r\n"), nil
	}
	return "", nil
}

// Password reads the Sentinels' password ("" when none is configured).
// env is the environment to look in (nil: the process environment).
func (s *Sentinel) Password(env func(string) (string, bool)) (string, error) {
	switch {
	case s.PasswordEnv != "":
		if env == nil {
			env = os.LookupEnv
		}
		p, ok := env(s.PasswordEnv)
		if !ok {
			return "", fmt.Errorf("valkey.sentinel.password_env: environment variable %s is not set", s.PasswordEnv)
		}
		return p, nil
	case s.PasswordFile != "":
		b, err := readSmallFile(s.PasswordFile)
		if err != nil {
			return "", fmt.Errorf("valkey.sentinel.password_file: %w", err)
		}
		return strings.TrimRight(string(b), "\r\n"), nil
	}
	return "", nil
}

// Token reads the admin token. env is the environment to look in (nil: the
// process environment).
func (a *Admin) Token(env func(string) (string, bool)) (string, error) {
	var tok string
	if a.TokenEnv != "" {
		if env == nil {
			env = os.LookupEnv
		}
		t, ok := env(a.TokenEnv)
		if !ok {
			return "", fmt.Errorf("admin.token_env: environment variable %s is not set", a.TokenEnv)
		}
		tok = t
	} else {
		b, err := readSmallFile(a.TokenFile)
		if err != nil {
			return "", fmt.Errorf("admin.token_file: %w", err)
		}
		tok = strings.TrimRight(string(b), "\r\n")
	}
	if len(tok) < 16 {
		return "", fmt.Errorf("admin token must be at least 16 characters, got %d", len(tok))
	}
	return tok, nil
}

func readSmallFile(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 64<<10))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return b, nil
}

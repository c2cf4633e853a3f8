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
	return readSecret("valkey.password", v.PasswordEnv, v.PasswordFile, env)
}

// Password reads the Sentinels' password ("" when none is configured).
// env is the environment to look in (nil: the process environment).
func (s *Sentinel) Password(env func(string) (string, bool)) (string, error) {
	return readSecret("valkey.sentinel.password", s.PasswordEnv, s.PasswordFile, env)
}

// Token reads the admin token. env is the environment to look in (nil: the
// process environment).
func (a *Admin) Token(env func(string) (string, bool)) (string, error) {
	var tok string
	var err error
	if a.TokenEnv != "" {
		tok, err = secretFromEnv("admin.token", a.TokenEnv, env)
	} else {
		tok, err = secretFromFile("admin.token", a.TokenFile)
	}
	if err != nil {
		return "", err
	}
	if len(tok) < 16 {
		return "", fmt.Errorf("admin token must be at least 16 characters, got %d", len(tok))
	}
	return tok, nil
}

// readSecret reads the secret the setting what (valkey.password, say)
// names: from the environment variable envName when set, else from the
// file fileName when set, else "".
func readSecret(what, envName, fileName string, env func(string) (string, bool)) (string, error) {
	switch {
	case envName != "":
		return secretFromEnv(what, envName, env)
	case fileName != "":
		return secretFromFile(what, fileName)
	}
	return "", nil
}

// secretFromEnv reads the secret of setting what from the environment
// variable name of env (nil: the process environment).
func secretFromEnv(what, name string, env func(string) (string, bool)) (string, error) {
	if env == nil {
		env = os.LookupEnv
	}
	p, ok := env(name)
	if !ok {
		return "", fmt.Errorf("%s_env: environment variable %s is not set", what, name)
	}
	return p, nil
}

// secretFromFile reads the secret of setting what from the file name,
// without its trailing line ends.
func secretFromFile(what, name string) (string, error) {
	b, err := readSmallFile(name)
	if err != nil {
		return "", fmt.Errorf("%s_file: %w", what, err)
	}
	return strings.TrimRight(string(b), "\r\n"), nil
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

package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
)

// newFlags returns the flag set of "sluice <name>". It prints nothing by
// itself: parseFlags says what went wrong, and where.
func newFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// parseFlags parses args into fs, the same way for every command: flags
// may come before, between or after the positional arguments (a "--"
// ends the flags: what follows is positional, even when it starts with
// "-"); -h, -help and --help print usage (the command's text, then its
// flags) on stdout and give exit code 0; a bad flag prints the error and
// a pointer to -h on stderr and gives exit code 2. ok is true when the
// command is to run; fs.Args() are then the positional arguments.
func parseFlags(fs *flag.FlagSet, usage string, args []string, stdout, stderr io.Writer) (code int, ok bool) {
	var pos []string
	for {
		err := fs.Parse(args)
		if errors.Is(err, flag.ErrHelp) {
			printUsage(fs, usage, stdout)
			return 0, false
		}
		if err != nil {
			return usageError(fs, stderr, "%v", err), false
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if afterDoubleDash(args, rest) {
			pos = append(pos, rest...) // after "--": all positional
			break
		}
		// Parse stopped at a positional argument: keep it and parse on.
		pos = append(pos, rest[0])
		args = rest[1:]
	}
	// Leave the positional arguments in fs.Args(), setting no flag.
	fs.Parse(append([]string{"--"}, pos...))
	return 0, true
}

// parseNoArgs is parseFlags for a command that takes no positional
// argument: one left over is a usage error.
func parseNoArgs(fs *flag.FlagSet, usage string, args []string, stdout, stderr io.Writer) (code int, ok bool) {
	if code, ok := parseFlags(fs, usage, args, stdout, stderr); !ok {
		return code, false
	}
	if fs.NArg() > 0 {
		return usageError(fs, stderr, "unexpected argument %q", fs.Arg(0)), false
	}
	return 0, true
}

// afterDoubleDash reports whether the parse of args stopped at rest
// because of a "--".
func afterDoubleDash(args, rest []string) bool {
	n := len(args) - len(rest)
	return n > 0 && args[n-1] == "--"
}

// printUsage writes usage and fs's flags to w.
func printUsage(fs *flag.FlagSet, usage string, w io.Writer) {
	fmt.Fprint(w, usage)
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
}

// usageError reports a misuse of "sluice <fs.Name()>" on stderr and returns
// the exit code for it, 2.
func usageError(fs *flag.FlagSet, stderr io.Writer, format string, args ...any) int {
	fmt.Fprintf(stderr, "sluice %s: %s\nRun \"sluice %s -h\" for usage.\n", fs.Name(), fmt.Sprintf(format, args...), fs.Name())
	return 2
}

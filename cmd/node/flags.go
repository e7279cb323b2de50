package main

import (
	"flag"
	"fmt"
	"io"
	"strings"
)

// newFlags is a leaf command's flag set. synopsis is its usage line after
// "node NAME"; about, if set, is printed under it.
func newFlags(name, synopsis, about string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // parse errors are reported by run, usage only on request
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "usage: node %s %s\n", name, synopsis)
		if about != "" {
			fmt.Fprintf(w, "\n%s\n", about)
		}
		n := 0
		fs.VisitAll(func(*flag.Flag) { n++ })
		if n > 0 {
			fmt.Fprintln(w, "\nflags (before or after the arguments; -- ends them):")
			printDefaults(w, fs)
		}
	}
	return fs
}

// parse parses args with flags and positional arguments in any order:
// Go's flag package stops at the first positional argument, so args are
// first reordered, flags (with their values) before positionals. "--" ends
// the flags; everything after it is positional. -h, -help or --help
// prints the usage to stdout and returns errHelp.
func parse(fs *flag.FlagSet, args []string) error {
	flags, pos, help, err := reorder(fs, args)
	if help {
		fs.SetOutput(stdout)
		fs.Usage()
		fs.SetOutput(io.Discard)
		return errHelp
	}
	if err == nil {
		err = fs.Parse(append(append(flags, "--"), pos...))
	}
	if err != nil {
		return usageError{fmt.Errorf("%s: %w (node %s -h for usage)", fs.Name(), err, fs.Name())}
	}
	return nil
}

// reorder splits args into flag tokens (each flag with its value, when the
// flag takes one and it is not written -name=value) and positionals.
func reorder(fs *flag.FlagSet, args []string) (flags, pos []string, help bool, err error) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return flags, append(pos, args[i+1:]...), help, err
		}
		if len(a) < 2 || a[0] != '-' {
			pos = append(pos, a)
			continue
		}
		name := strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
		name, _, hasValue := strings.Cut(name, "=")
		f := fs.Lookup(name)
		if f == nil && (name == "h" || name == "help") {
			help = true
			continue
		}
		flags = append(flags, a)
		if f == nil || hasValue || isBool(f) {
			continue // an unknown flag is reported by fs.Parse
		}
		if i+1 == len(args) {
			if err == nil {
				err = fmt.Errorf("flag needs an argument: %s", a)
			}
			continue
		}
		i++
		flags = append(flags, args[i])
	}
	return flags, pos, help, err
}

func isBool(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// group prints a command group's usage (node turn, node audit) on -h, or
// refuses a missing or unknown subcommand.
func group(name, help string, args []string, known ...string) (string, []string, error) {
	if len(args) == 0 {
		return "", nil, usageError{fmt.Errorf("%s needs a subcommand: %s (node %s -h for usage)", name, strings.Join(known, ", "), name)}
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprintln(stdout, help)
		return "", nil, errHelp
	}
	for _, k := range known {
		if args[0] == k {
			return args[0], args[1:], nil
		}
	}
	return "", nil, usageError{fmt.Errorf("unknown %s subcommand %q: %s (node %s -h for usage)", name, args[0], strings.Join(known, ", "), name)}
}

// printDefaults is flag.PrintDefaults with the --name spelling the
// documentation uses.
func printDefaults(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		arg, help := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		switch {
		case isBool(f):
		case arg == "value":
			line += " FILE"
		default:
			line += " " + strings.ToUpper(arg)
		}
		switch f.DefValue {
		case "", "false", "0", "0s":
		default:
			help += " (default " + f.DefValue + ")"
		}
		fmt.Fprintf(w, "%s\n    \t%s\n", line, strings.ReplaceAll(help, "\n", "\n    \t"))
	})
}

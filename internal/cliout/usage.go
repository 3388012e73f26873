package cliout

import (
	"errors"
	"flag"
	"fmt"
)

// ErrHelp is returned when -h was asked for: usage was printed, exit 0.
var ErrHelp = errors.New("help requested")

// UsageError marks an error as the caller's: bad flags or arguments. The
// tools print the subcommand's usage with it and exit 2.
type UsageError struct{ Err error }

func (e UsageError) Error() string { return e.Err.Error() }
func (e UsageError) Unwrap() error { return e.Err }

// Usagef returns a UsageError.
func Usagef(format string, args ...any) error {
	return UsageError{fmt.Errorf(format, args...)}
}

// ParseFlags parses args into fs and maps the flag package's outcomes onto
// the tools' conventions: -h is ErrHelp, anything else wrong a UsageError.
func ParseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return ErrHelp
		}
		return UsageError{err}
	}
	return nil
}

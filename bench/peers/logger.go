package peers

import (
	"fmt"
	"os"
)

// quietLogger drops the peers' informational chatter (it would interleave with
// the report) but keeps warnings and errors on stderr, because an error a peer
// logs can explain a bad figure.
type quietLogger struct{ name string }

func (l quietLogger) Infof(string, ...interface{})  {}
func (l quietLogger) Debugf(string, ...interface{}) {}
func (l quietLogger) Warningf(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "%s: warning: %s\n", l.name, fmt.Sprintf(format, args...))
}
func (l quietLogger) Errorf(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "%s: error: %s\n", l.name, fmt.Sprintf(format, args...))
}

// Fatalf is Pebble's: it promises not to return.
func (l quietLogger) Fatalf(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "%s: fatal: %s\n", l.name, fmt.Sprintf(format, args...))
	os.Exit(2)
}

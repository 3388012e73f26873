// Package cliout is what segkv's command-line tools share: their output
// (aligned tables by default, one JSON object per row on request, and a
// one-line progress status that shows only on a terminal, so piped output
// stays clean) and their flag and usage-error conventions.
package cliout

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"golang.org/x/term"
)

// Row is one line of output: a JSON object with -json (its exported
// fields), a table line otherwise.
type Row interface {
	Header() []string
	Cells() []string
}

// Printer writes rows. Tables are aligned with tabwriter and get a new
// header whenever the kind of row changes.
type Printer struct {
	json    bool
	enc     *json.Encoder
	tw      *tabwriter.Writer
	lastHdr string
}

// NewPrinter writes to w, as JSON lines if asJSON, else as tables.
func NewPrinter(w io.Writer, asJSON bool) *Printer {
	p := &Printer{json: asJSON}
	if asJSON {
		p.enc = json.NewEncoder(w)
	} else {
		p.tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	}
	return p
}

// Note prints a comment line ("# ...") in table mode; JSON output stays
// rows only.
func (p *Printer) Note(format string, args ...any) error {
	if p.json {
		return nil
	}
	if err := p.tw.Flush(); err != nil {
		return err
	}
	p.lastHdr = ""
	_, err := fmt.Fprintf(p.tw, "# "+format+"\n", args...)
	if err != nil {
		return err
	}
	return p.tw.Flush()
}

// Print writes one row.
func (p *Printer) Print(r Row) error {
	if p.json {
		if err := p.enc.Encode(r); err != nil {
			return fmt.Errorf("write JSON row: %w", err)
		}
		return nil
	}
	h := strings.Join(r.Header(), "\t")
	if h != p.lastHdr {
		if p.lastHdr != "" {
			fmt.Fprintln(p.tw)
		}
		fmt.Fprintln(p.tw, h+"\t")
		p.lastHdr = h
	}
	_, err := fmt.Fprintln(p.tw, strings.Join(r.Cells(), "\t")+"\t")
	return err
}

// Flush writes out a table's buffered lines.
func (p *Printer) Flush() error {
	if p.json {
		return nil
	}
	if err := p.tw.Flush(); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	return nil
}

// Progress writes a one-line status that each update overwrites, when on
// (the output is a terminal), and nothing otherwise.
type Progress struct {
	w  io.Writer
	on bool
}

// NewProgress returns a status line on w, shown only if on.
func NewProgress(w io.Writer, on bool) *Progress { return &Progress{w: w, on: on} }

// Update replaces the status line.
func (p *Progress) Update(format string, args ...any) {
	if p.on {
		fmt.Fprintf(p.w, "\r\033[K"+format, args...)
	}
}

// Done clears the status line.
func (p *Progress) Done() {
	if p.on {
		fmt.Fprint(p.w, "\r\033[K")
	}
}

// IsTerminal reports whether f is a terminal (a console on Windows).
func IsTerminal(f *os.File) bool { return term.IsTerminal(int(f.Fd())) }

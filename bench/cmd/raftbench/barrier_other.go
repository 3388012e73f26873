//go:build !linux

package main

import (
	"errors"
	"time"
)

var barrierPatterns = []string{"zeroed+fdatasync", "fallocated+fsync"}

// barrierFile is not measured outside Linux (fallocate, fdatasync).
type barrierFile struct{}

func openBarrier(dir, pattern string) (*barrierFile, error) {
	return nil, errors.ErrUnsupported
}

func (bf *barrierFile) write(buf []byte) (time.Duration, error) { return 0, errors.ErrUnsupported }

func (bf *barrierFile) close() error { return nil }

//go:build tools

package segkv

import (
	_ "github.com/bits-and-blooms/bloom/v3"
	_ "github.com/cespare/xxhash/v2"
	_ "github.com/stretchr/testify/require"
	_ "golang.org/x/sys/unix"
	_ "pgregory.net/rapid"
)

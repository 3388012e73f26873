module github.com/segkv/segkv

go 1.26.0

require (
	github.com/bits-and-blooms/bloom/v3 v3.7.1
	github.com/cespare/xxhash/v2 v2.3.0
	github.com/klauspost/compress v1.18.0
	github.com/stretchr/testify v1.11.1
	github.com/tidwall/btree v1.8.2
	golang.org/x/sys v0.50.0
	golang.org/x/term v0.48.0
	pgregory.net/rapid v1.2.0
)

require (
	github.com/bits-and-blooms/bitset v1.24.2 // indirect
	github.com/davecgh/go-spew v1.1.1 // indirect
	github.com/pmezard/go-difflib v1.0.0 // indirect
	gopkg.in/yaml.v3 v3.0.1 // indirect
)

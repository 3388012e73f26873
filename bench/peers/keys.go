package peers

import (
	"encoding/binary"
	"slices"
)

// KeySize and ValueSize are the record shape of every workload (the brief's
// 32-byte keys and 100-byte values).
const (
	KeySize   = 32
	ValueSize = 100
)

const hexDigits = "0123456789abcdef"

// mix is splitmix64's finaliser: a cheap bijection on uint64 that spreads
// consecutive integers uniformly, so key i lands at a random place in key
// order (an insert-ordered load would flatter B-trees and LSMs alike).
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// Key writes key number i into dst (len >= KeySize) and returns dst[:KeySize].
// The first 16 hex digits are a hash of i (random order), the last 16 are i
// itself, so keys are distinct for distinct i. Workloads use i in [0, n) for
// keys that exist and i in [n, 2n) for keys that do not.
func Key(dst []byte, i uint64) []byte {
	dst = dst[:KeySize]
	putHex(dst[:16], mix(i))
	putHex(dst[16:], i)
	return dst
}

// ShortKeySize is the size of ShortKey's keys.
const ShortKeySize = 16

// ShortKey writes the 16-byte key of number i into dst (len >=
// ShortKeySize) and returns dst[:ShortKeySize]: the 16 hex digits of mix(i),
// which are Key's first 16, so keys are distinct for distinct i, land in
// random order, and KeyOrder gives their order too.
func ShortKey(dst []byte, i uint64) []byte {
	dst = dst[:ShortKeySize]
	putHex(dst, mix(i))
	return dst
}

// KeyOrder returns the key numbers [0, n) in the byte order of their keys
// (Key's and ShortKey's alike).
// Keys compare as their first 16 hex digits, mix(i), which are distinct for
// distinct i, so sorting the n hashes and inverting mix gives the order
// without building or comparing a single key: 8 bytes per key, which matters
// for the scale workload's tens of millions of keys.
func KeyOrder(n int) []uint64 {
	order := make([]uint64, n)
	for i := range order {
		order[i] = mix(uint64(i))
	}
	slices.Sort(order)
	for j, h := range order {
		order[j] = unmix(h)
	}
	return order
}

// unmix inverts mix.
func unmix(x uint64) uint64 {
	x = unshift(x, 31) * inverse(0x94d049bb133111eb)
	x = unshift(x, 27) * inverse(0xbf58476d1ce4e5b9)
	return unshift(x, 30) - 0x9e3779b97f4a7c15
}

// unshift inverts x ^= x >> s.
func unshift(x uint64, s uint) uint64 {
	y := x
	for i := s; i < 64; i += s {
		y = x ^ y>>s
	}
	return y
}

// inverse is the multiplicative inverse of odd a modulo 2^64 (Newton's
// iteration: each step doubles the correct low bits, 3 -> 6 -> ... -> 96).
func inverse(a uint64) uint64 {
	inv := a // correct to 3 bits for odd a
	for range 5 {
		inv *= 2 - a*inv
	}
	return inv
}

func putHex(dst []byte, v uint64) {
	for j := 15; j >= 0; j-- {
		dst[j] = hexDigits[v&15]
		v >>= 4
	}
}

// Value writes the value of key number i into dst (len >= ValueSize) and
// returns dst[:ValueSize]. It is pseudo-random, so that no engine's block
// compression gets an advantage the others cannot have.
func Value(dst []byte, i uint64) []byte {
	dst = dst[:ValueSize]
	x := mix(i ^ 0x5bd1e995)
	for j := 0; j+8 <= ValueSize; j += 8 {
		x = mix(x)
		binary.LittleEndian.PutUint64(dst[j:], x)
	}
	x = mix(x)
	for j := ValueSize &^ 7; j < ValueSize; j++ {
		dst[j] = byte(x)
		x >>= 8
	}
	return dst
}

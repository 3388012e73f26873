package raftstore

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"pgregory.net/rapid"

	"github.com/segkv/segkv/vfs"
)

// TestModelAgainstInmemStore drives a Store and raft.InmemStore with the same
// raft-shaped operations (appends, appends after a gap, tail truncations
// followed by overwrites, head truncations, holes, stable keys, reopens) and
// compares every entry and value after each step. The bounds are compared
// with the exact smallest and largest index held: InmemStore's own bounds
// are an approximation after a gap (its FirstIndex is the first index ever
// stored, not the smallest).
func TestModelAgainstInmemStore(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		mem := vfs.NewMem()
		open := func() *Store {
			s, err := Open("/raft", &Options{FS: mem, SegmentSize: 4 << 10})
			if err != nil {
				rt.Fatal(err)
			}
			return s
		}
		s := open()
		defer func() { s.Close() }()
		ref := raft.NewInmemStore()
		held := map[uint64]bool{}
		stable := map[string]bool{}
		term := uint64(1)

		bounds := func() (uint64, uint64) {
			if len(held) == 0 {
				return 0, 0
			}
			ks := slices.Collect(maps.Keys(held))
			return slices.Min(ks), slices.Max(ks)
		}
		store := func(logs []*raft.Log) {
			if err := s.StoreLogs(logs); err != nil {
				rt.Fatal(err)
			}
			if err := ref.StoreLogs(logs); err != nil {
				rt.Fatal(err)
			}
			for _, l := range logs {
				held[l.Index] = true
			}
		}
		del := func(lo, hi uint64) {
			if err := s.DeleteRange(lo, hi); err != nil {
				rt.Fatal(err)
			}
			ref.DeleteRange(lo, hi)
			for i := range held {
				if i >= lo && i <= hi {
					delete(held, i)
				}
			}
		}
		batch := func(from uint64, n int) []*raft.Log {
			logs := make([]*raft.Log, n)
			for j := range logs {
				i := from + uint64(j)
				logs[j] = &raft.Log{
					Index: i, Term: term, Type: raft.LogType(rapid.IntRange(0, 5).Draw(rt, "type")),
					Data:       []byte(fmt.Sprintf("%d/%d/%s", i, term, rapid.StringN(0, 40, -1).Draw(rt, "data"))),
					AppendedAt: time.Unix(0, int64(i)*1000+int64(term)),
				}
				if rapid.Bool().Draw(rt, "ext") {
					logs[j].Extensions = []byte{byte(term)}
				}
			}
			return logs
		}

		rt.Repeat(map[string]func(*rapid.T){
			"append": func(rt *rapid.T) {
				_, last := bounds()
				store(batch(last+1, rapid.IntRange(1, 64).Draw(rt, "n")))
			},
			"appendAfterGap": func(rt *rapid.T) {
				_, last := bounds()
				store(batch(last+uint64(rapid.IntRange(2, 50).Draw(rt, "gap")), rapid.IntRange(1, 8).Draw(rt, "n")))
			},
			"truncateTailAndOverwrite": func(rt *rapid.T) {
				first, last := bounds()
				if first == 0 {
					return
				}
				from := rapid.Uint64Range(first, last).Draw(rt, "from")
				del(from, last)
				term++
				store(batch(from, rapid.IntRange(1, 16).Draw(rt, "n")))
			},
			"truncateHead": func(rt *rapid.T) {
				first, last := bounds()
				if first == 0 {
					return
				}
				del(first, rapid.Uint64Range(first, last).Draw(rt, "to"))
			},
			"hole": func(rt *rapid.T) {
				first, last := bounds()
				if last-first < 3 {
					return
				}
				lo := rapid.Uint64Range(first+1, last-1).Draw(rt, "lo")
				del(lo, rapid.Uint64Range(lo, last-1).Draw(rt, "hi"))
			},
			"setStable": func(rt *rapid.T) {
				k := rapid.SampledFrom([]string{"CurrentTerm", "LastVoteTerm", "LastVoteCand", ""}).Draw(rt, "key")
				if rapid.Bool().Draw(rt, "uint") {
					v := rapid.Uint64().Draw(rt, "v")
					if err := s.SetUint64([]byte(k), v); err != nil {
						rt.Fatal(err)
					}
					ref.SetUint64([]byte(k), v)
					// InmemStore keeps uint64s apart from values; the
					// Store (like raft-boltdb) keeps one namespace.
					ref.Set([]byte(k), nil)
				} else {
					v := []byte(rapid.StringN(1, 20, -1).Draw(rt, "v"))
					if err := s.Set([]byte(k), v); err != nil {
						rt.Fatal(err)
					}
					ref.Set([]byte(k), v)
					ref.SetUint64([]byte(k), 0)
				}
				stable[k] = true
			},
			"reopen": func(rt *rapid.T) {
				if err := s.Close(); err != nil {
					rt.Fatal(err)
				}
				s = open()
			},
			"": func(rt *rapid.T) {
				first, last := bounds()
				gf, _ := s.FirstIndex()
				gl, _ := s.LastIndex()
				if gf != first || gl != last {
					rt.Fatalf("bounds %d..%d, want %d..%d", gf, gl, first, last)
				}
				// Every index the ref holds or ever held nearby, and the
				// ones around the bounds.
				for i := uint64(0); i <= last+2; i++ {
					var got, want raft.Log
					gerr := s.GetLog(i, &got)
					werr := ref.GetLog(i, &want)
					if (gerr == nil) != (werr == nil) {
						rt.Fatalf("GetLog(%d): %v, InmemStore: %v", i, gerr, werr)
					}
					if gerr != nil {
						if gerr != raft.ErrLogNotFound {
							rt.Fatalf("GetLog(%d): %v, want ErrLogNotFound", i, gerr)
						}
						continue
					}
					if got.Index != want.Index || got.Term != want.Term || got.Type != want.Type ||
						string(got.Data) != string(want.Data) || string(got.Extensions) != string(want.Extensions) ||
						!got.AppendedAt.Equal(want.AppendedAt) {
						rt.Fatalf("GetLog(%d) = %+v, InmemStore %+v", i, got, want)
					}
				}
				for k := range stable {
					if v, err := ref.Get([]byte(k)); err == nil && v != nil {
						got, err := s.Get([]byte(k))
						if err != nil || string(got) != string(v) {
							rt.Fatalf("Get(%q) = %q, %v; want %q", k, got, err, v)
						}
					} else {
						want, _ := ref.GetUint64([]byte(k))
						got, err := s.GetUint64([]byte(k))
						if err != nil || got != want {
							rt.Fatalf("GetUint64(%q) = %d, %v; want %d", k, got, err, want)
						}
					}
				}
			},
		})
	})
}

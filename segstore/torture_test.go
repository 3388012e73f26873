package segstore

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The kill -9 torture test runs a child process (this test binary again)
// that writes with durable sync on the real disk and reports every
// acknowledged key to the parent over a pipe. The parent kills it at a random
// moment, reopens the store, checks every acknowledged key, and repeats.
// Small segments and an eager merge policy make seals, merges and manifest
// checkpoints happen all the time, so kills land inside them too.

const tortureChildEnv = "SEGKV_TORTURE_CHILD_DIR"

func tortureOptions() *Options {
	return &Options{SegmentSize: 16 << 10, Merge: MergeOptions{MinRun: 2, SizeRatio: 8}}
}

// TestTortureChild is the child's body; it does nothing in a normal run.
func TestTortureChild(t *testing.T) {
	dir := os.Getenv(tortureChildEnv)
	if dir == "" {
		t.Skip("only runs as the child of TestTortureKill9")
	}
	cycle := os.Getenv("SEGKV_TORTURE_CYCLE")
	s, err := Open(dir, tortureOptions())
	if err != nil {
		fmt.Printf("ERR open: %v\n", err)
		os.Exit(3)
	}
	out := bufio.NewWriter(os.Stdout)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	for i := 0; ; i++ {
		k := fmt.Sprintf("c%s-%06d", cycle, i)
		v := strings.Repeat(k, 1+rng.IntN(8))
		if rng.IntN(4) == 0 {
			b := s.NewBatch()
			b.Put([]byte(k), []byte(v))
			b.Put([]byte(k+"-b"), []byte(v))
			err = s.Apply(b)
		} else {
			err = s.Put([]byte(k), []byte(v))
		}
		if err != nil {
			fmt.Printf("ERR put: %v\n", err)
			os.Exit(4)
		}
		fmt.Fprintf(out, "%s %d\n", k, len(v))
		out.Flush()
		if i%97 == 96 {
			s.Compact(context.Background())
		}
	}
}

func tortureCycles(t *testing.T) int {
	if v := os.Getenv("SEGKV_TORTURE_CYCLES"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err)
		return n
	}
	if testing.Short() {
		return 3
	}
	return 12
}

func TestTortureKill9(t *testing.T) {
	if os.Getenv(tortureChildEnv) != "" {
		t.Skip("child")
	}
	dir := t.TempDir()
	cycles := tortureCycles(t)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 2))
	acked := map[string]int{} // key -> value length
	var wrong, checked int
	for c := 0; c < cycles; c++ {
		cmd := exec.Command(os.Args[0], "-test.run=^TestTortureChild$", "-test.v=false")
		cmd.Env = append(os.Environ(), tortureChildEnv+"="+dir, "SEGKV_TORTURE_CYCLE="+strconv.Itoa(c))
		stdout, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		lines := make(chan string, 1024)
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		deadline := time.After(time.Duration(50+rng.IntN(400)) * time.Millisecond)
	read:
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					break read
				}
				if strings.HasPrefix(l, "ERR") {
					t.Fatalf("child: %s", l)
				}
				var k string
				var n int
				if _, err := fmt.Sscanf(l, "%s %d", &k, &n); err == nil {
					acked[k] = n
				}
			case <-deadline:
				break read
			}
		}
		require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
		// Keys acknowledged before the kill may still sit in the pipe.
		for l := range lines {
			var k string
			var n int
			if _, err := fmt.Sscanf(l, "%s %d", &k, &n); err == nil {
				acked[k] = n
			}
		}
		cmd.Wait()

		s, err := Open(dir, tortureOptions())
		require.NoError(t, err, "cycle %d: reopen after kill -9", c)
		for k, n := range acked {
			v, err := s.Get([]byte(k))
			checked++
			if err != nil || len(v) != n || !strings.HasPrefix(string(v), k) {
				wrong++
				t.Errorf("cycle %d: key %s: %d bytes, err %v; want %d bytes", c, k, len(v), err, n)
			}
		}
		require.NoError(t, s.Check())
		require.NoError(t, s.Close())
	}
	t.Logf("kill -9 cycles: %d, acknowledged keys: %d, reads checked: %d, wrong answers: %d", cycles, len(acked), checked, wrong)
	require.Greater(t, len(acked), cycles, "the child must make progress")
}

package corruption

import (
	"errors"
	"fmt"
	"testing"
)

func TestErrorMatchesSentinelThroughWrapping(t *testing.T) {
	err := fmt.Errorf("open store: %w", New("/db/1.log", 42, "bad frame %d", 3))
	if !errors.Is(err, ErrCorrupt) {
		t.Fatal("wrapped *Error does not match ErrCorrupt")
	}
	var ce *Error
	if !errors.As(err, &ce) || ce.Path != "/db/1.log" || ce.Offset != 42 || ce.Reason != "bad frame 3" {
		t.Fatalf("detail lost: %+v", ce)
	}
	if got, want := ce.Error(), "segkv: corruption in /db/1.log at offset 42: bad frame 3"; got != want {
		t.Fatalf("message %q, want %q", got, want)
	}
	if got := New("m", -1, "gone").Error(); got != "segkv: corruption in m: gone" {
		t.Fatalf("message without offset: %q", got)
	}
	if errors.Is(errors.New("other"), ErrCorrupt) {
		t.Fatal("unrelated error matches")
	}
}

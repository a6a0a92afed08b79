package ctxaware

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

type declared struct{}
type undeclared struct{}

func TestHonours(t *testing.T) {
	Declare((*declared)(nil))
	if !Honours(&declared{}) {
		t.Error("Honours(*declared) = false after Declare, want true")
	}
	if Honours(&undeclared{}) || Honours(declared{}) {
		t.Error("Honours of an undeclared type = true, want false")
	}
}

// TestDetached checks each way a detached call ends: the store's answer,
// the store's own error soon after its context ended (kept, since it says
// more), a store that ignores its context (abandoned after Grace, with the
// context's cause), and a panic (an error).
func TestDetached(t *testing.T) {
	ctx := context.Background()
	if v, err := Detached(ctx, "p: ", func(context.Context) (int, error) { return 7, nil }); v != 7 || err != nil {
		t.Errorf("Detached(answers 7) = %d, %v; want 7, nil", v, err)
	}

	own := errors.New("store: gave up")
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	_, err := Detached(short, "p: ", func(ctx context.Context) (int, error) {
		<-ctx.Done()
		time.Sleep(time.Millisecond)
		return 0, own
	})
	if !errors.Is(err, own) {
		t.Errorf("Detached(store that gives up 1ms after ctx) = %v, want the store's own error", err)
	}

	release := make(chan struct{})
	defer close(release)
	short2, cancel2 := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel2()
	start := time.Now()
	_, err = Detached(short2, "p: ", func(context.Context) (int, error) {
		<-release
		return 1, nil
	})
	took := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.HasPrefix(err.Error(), "p: ") {
		t.Errorf("Detached(store that ignores ctx) = %v, want an error starting with the prefix and wrapping context.DeadlineExceeded", err)
	}
	if took > 20*time.Millisecond+Grace+500*time.Millisecond {
		t.Errorf("Detached(store that ignores ctx) took %v, want about 20ms + %v", took, Grace)
	}

	_, err = Detached(ctx, "p: ", func(context.Context) (int, error) { panic("boom") })
	if err == nil || !strings.Contains(err.Error(), "panicked: boom") {
		t.Errorf("Detached(store that panics) = %v, want an error saying it panicked", err)
	}
}

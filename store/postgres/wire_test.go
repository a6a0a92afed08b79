package postgres

import (
	"encoding/binary"
	"strconv"
	"testing"
)

// binaryDecision is PostgreSQL's binary format of a one-dimensional
// bigint[] holding vs.
func binaryDecision(vs ...int64) []byte {
	b := binary.BigEndian.AppendUint32(nil, 1) // dimensions
	b = binary.BigEndian.AppendUint32(b, 0)    // no NULLs
	b = binary.BigEndian.AppendUint32(b, 20)   // int8's OID
	b = binary.BigEndian.AppendUint32(b, uint32(len(vs)))
	b = binary.BigEndian.AppendUint32(b, 1) // lower bound
	for _, v := range vs {
		b = binary.BigEndian.AppendUint32(b, 8)
		b = binary.BigEndian.AppendUint64(b, uint64(v))
	}
	return b
}

func TestDecodeDecision(t *testing.T) {
	want := [6]int64{1, 10, -3, 0, 9_223_372_036_854_775_807, -9_223_372_036_854_775_808}
	for _, raw := range [][]byte{
		binaryDecision(want[:]...),
		[]byte("{1,10,-3,0,9223372036854775807,-9223372036854775808}"),
	} {
		var got [6]int64
		if err := decodeDecision(raw, &got); err != nil || got != want {
			t.Errorf("decodeDecision(%q) = %v, %v; want %v", raw, got, err, want)
		}
	}
	for _, raw := range [][]byte{
		nil,
		binaryDecision(1, 2, 3, 4, 5),
		binaryDecision(1, 2, 3, 4, 5, 6, 7),
		binaryDecision(1, 2, 3, 4, 5, 6)[:40],
		[]byte("{1,2,3,4,5}"),
		[]byte("{1,2,3,4,5,6,7}"),
		[]byte("{1,2,3,4,5,x}"),
		[]byte("{1,2,3,4,5,NULL}"),
		[]byte("{"),
		[]byte("{1,2,3,4,5,6"),
	} {
		var got [6]int64
		if err := decodeDecision(raw, &got); err == nil {
			t.Errorf("decodeDecision(%q) = %v, nil; want an error", raw, got)
		}
	}
	// A NULL element (length -1) is not a decision.
	raw := binaryDecision(1, 2, 3, 4, 5, 6)
	binary.BigEndian.PutUint32(raw[20+12*5:], 0xffffffff)
	var got [6]int64
	if err := decodeDecision(raw[:len(raw)-8], &got); err == nil {
		t.Errorf("decodeDecision with a NULL element = %v, nil; want an error", got)
	}
}

func TestArgsCache(t *testing.T) {
	var c argsCache
	lists := [][]int64{nil, {}, {1}, {1, 2}, {2, 1}, {-9_223_372_036_854_775_808, 9_223_372_036_854_775_807}}
	want := []string{"{}", "{}", "{1}", "{1,2}", "{2,1}", "{-9223372036854775808,9223372036854775807}"}
	// More distinct lists than slots, twice over, so that entries are
	// replaced and built again.
	for i := int64(0); i < 3*argsCacheSize; i++ {
		lists = append(lists, []int64{i, i * i})
		want = append(want, "{"+strconv.FormatInt(i, 10)+","+strconv.FormatInt(i*i, 10)+"}")
	}
	for round := 0; round < 2; round++ {
		for i, args := range lists {
			if got := c.text(args); got != want[i] {
				t.Fatalf("round %d: text(%v) = %v, want %s", round, args, got, want[i])
			}
		}
	}
	// The cache keeps its own copy: changing the caller's slice changes
	// nothing.
	args := []int64{7, 8}
	_ = c.text(args)
	args[0] = 9
	if got := c.text([]int64{7, 8}); got != "{7,8}" {
		t.Fatalf("text([7 8]) after the caller changed its slice = %v", got)
	}
}

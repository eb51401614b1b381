package wire

import (
	"encoding/binary"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// MaxMsgpackDepth bounds how deeply arrays and maps nest in a payload. Ours nest five deep (a task message's items,
// their inputs, a tensor's shape); the rest is room for fields a newer sender adds, which the decoder skips.
const MaxMsgpackDepth = 32

// UnmarshalMsgpack decodes a msgpack payload read from outside (a request, task, result or demand message) into v,
// after CheckMsgpack: every payload from the network goes through here, never through msgpack.Unmarshal directly.
func UnmarshalMsgpack(data []byte, v any) error {
	if err := CheckMsgpack(data); err != nil {
		return err
	}
	return msgpack.Unmarshal(data, v)
}

// CheckMsgpack walks the msgpack value at the start of data without decoding it, and refuses it unless every length
// it claims (of a string, binary, extension, array or map) is backed by the bytes that follow, and its containers nest
// at most MaxMsgpackDepth deep. msgpack/v5 (v5.4.1) sizes what it decodes from claimed lengths before reading what
// they claim: a slice from an array's length (its allocation limit is never applied: decodeSliceValue tests a flag
// with `!= 1`), a []byte from a binary's length, a string from a string's length up to 1 MiB. After this check, a
// claimed length is at most the number of bytes left, so what the decoder allocates is bounded by a multiple of
// len(data). Bytes after the value are not looked at (msgpack.Unmarshal ignores them too).
func CheckMsgpack(data []byte) error {
	// pending[i] counts the values still to read in the i-th open container; the outermost "container" is the one
	// value data holds.
	var stack [MaxMsgpackDepth + 1]int
	pending := stack[:1]
	pending[0] = 1
	pos := 0
	for {
		for len(pending) > 0 && pending[len(pending)-1] == 0 {
			pending = pending[:len(pending)-1]
		}
		if len(pending) == 0 {
			return nil
		}
		pending[len(pending)-1]--
		if pos >= len(data) {
			return fmt.Errorf("msgpack: data ends after %d bytes, inside a value", len(data))
		}
		at := pos
		h, next, err := readMsgpackHead(data, at)
		if err != nil {
			return err
		}
		pos = next
		size, count, kind := h.size, h.count, h.kind
		left := uint64(len(data) - pos)
		if size > left {
			return fmt.Errorf("msgpack: the %s at byte %d claims %d bytes, %d left", kind, at, size, left)
		}
		pos += int(size)
		if count == 0 {
			continue
		}
		// Every element takes at least one byte.
		if count > left {
			if kind == kindMap {
				count /= 2 // report the key-value pairs it claimed
			}
			return fmt.Errorf("msgpack: the %s at byte %d claims %d elements, %d bytes left", kind, at, count, left)
		}
		if len(pending) == cap(pending) {
			return fmt.Errorf("msgpack: the %s at byte %d nests deeper than %d", kind, at, MaxMsgpackDepth)
		}
		pending = append(pending, int(count))
	}
}

// msgpackKind is the kind of a msgpack value, as its header says.
type msgpackKind uint8

// The kinds a header tells apart; kindNone is a value without payload (fixint, nil, bool).
const (
	kindNone msgpackKind = iota
	kindMap
	kindArray
	kindString
	kindBinary
	kindExtension
	kindNumber
)

// String names the kind, for errors.
func (k msgpackKind) String() string {
	return [...]string{"", "map", "array", "string", "binary", "extension", "number"}[k]
}

// msgpackHead is what the header of one msgpack value claims follows it.
type msgpackHead struct {
	kind msgpackKind // a number, not a string: read for every value of every task message
	// size is the bytes of payload after the header; count the values a container holds (uint64: a claim is
	// compared with what is left before it becomes an int).
	size, count uint64
}

// readMsgpackHead reads the header of the value at data[at] (at < len(data)): its code and, for the longer forms,
// its length. pos is where the value's payload starts.
func readMsgpackHead(data []byte, at int) (h msgpackHead, pos int, err error) {
	c := data[at]
	pos = at + 1
	switch {
	case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3: // fixint, nil, bool
		return h, pos, nil
	case c <= 0x8f:
		return msgpackHead{kind: kindMap, count: 2 * uint64(c&0x0f)}, pos, nil
	case c <= 0x9f:
		return msgpackHead{kind: kindArray, count: uint64(c & 0x0f)}, pos, nil
	case c <= 0xbf:
		return msgpackHead{kind: kindString, size: uint64(c & 0x1f)}, pos, nil
	}
	var lenBytes int
	switch c {
	case 0xc4, 0xc5, 0xc6:
		h.kind, lenBytes = kindBinary, 1<<(c-0xc4)
	case 0xc7, 0xc8, 0xc9:
		h.kind, lenBytes = kindExtension, 1<<(c-0xc7)
	case 0xd9, 0xda, 0xdb:
		h.kind, lenBytes = kindString, 1<<(c-0xd9)
	case 0xdc, 0xdd:
		h.kind, lenBytes = kindArray, 2<<(c-0xdc)
	case 0xde, 0xdf:
		h.kind, lenBytes = kindMap, 2<<(c-0xde)
	case 0xca, 0xcb: // float32, float64
		h.kind, h.size = kindNumber, 4<<(c-0xca)
	case 0xcc, 0xcd, 0xce, 0xcf: // uint8..uint64
		h.kind, h.size = kindNumber, 1<<(c-0xcc)
	case 0xd0, 0xd1, 0xd2, 0xd3: // int8..int64
		h.kind, h.size = kindNumber, 1<<(c-0xd0)
	case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8: // fixext: a type byte and 1..16 bytes
		h.kind, h.size = kindExtension, 1+1<<(c-0xd4)
	default: // 0xc1 is never used
		return h, pos, fmt.Errorf("msgpack: invalid code 0x%02x at byte %d", c, at)
	}
	if lenBytes == 0 {
		return h, pos, nil
	}
	if len(data)-pos < lenBytes {
		return h, pos, fmt.Errorf("msgpack: data ends inside the length of the %s at byte %d", h.kind, at)
	}
	var n uint64
	switch lenBytes {
	case 1:
		n = uint64(data[pos])
	case 2:
		n = uint64(binary.BigEndian.Uint16(data[pos:]))
	default:
		n = uint64(binary.BigEndian.Uint32(data[pos:]))
	}
	pos += lenBytes
	switch h.kind {
	case kindArray:
		h.count = n
	case kindMap:
		h.count = 2 * n
	case kindExtension:
		h.size = n + 1 // the type byte
	default:
		h.size = n
	}
	return h, pos, nil
}

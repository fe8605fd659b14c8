// The Go side of the cross-language wire check run by tools/interop.
//
//	interop EVENTS.bin OUT.json
//
// EVENTS.bin holds model.v1.StreamEvent messages produced by the Python server, each preceded
// by its length as a base-128 varint (protobuf's size-delimited framing). Every event is
// decoded with the protoc-gen-go types and written to OUT.json as a JSON array of proto3 JSON
// objects; tools/interop compares them with google's upb decoding of the same bytes.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	modelv1 "protocolpy.interop/gen/model/v1"
)

func decode(data []byte) ([]json.RawMessage, error) {
	var events []json.RawMessage
	for offset := 0; offset < len(data); {
		size, n := protowire.ConsumeVarint(data[offset:])
		if n < 0 {
			return nil, fmt.Errorf("bad length prefix at byte %d", offset)
		}
		offset += n
		if uint64(len(data)-offset) < size {
			return nil, fmt.Errorf("truncated frame at byte %d: %d bytes announced", offset, size)
		}
		event := &modelv1.StreamEvent{}
		if err := proto.Unmarshal(data[offset:offset+int(size)], event); err != nil {
			return nil, fmt.Errorf("event %d: %w", len(events), err)
		}
		if event.GetEvent() == nil {
			return nil, fmt.Errorf("event %d has no oneof case set", len(events))
		}
		text, err := protojson.Marshal(event)
		if err != nil {
			return nil, fmt.Errorf("event %d: %w", len(events), err)
		}
		events = append(events, json.RawMessage(text))
		offset += int(size)
	}
	return events, nil
}

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: interop EVENTS.bin OUT.json")
		os.Exit(1)
	}
	data, err := os.ReadFile(os.Args[1])
	if err == nil {
		var events []json.RawMessage
		events, err = decode(data)
		if err == nil {
			var out []byte
			out, err = json.Marshal(events)
			if err == nil {
				err = os.WriteFile(os.Args[2], out, 0o644)
				fmt.Printf("decoded %d StreamEvents\n", len(events))
			}
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "interop (Go): %v\n", err)
		os.Exit(1)
	}
}

// The TypeScript side of the cross-language wire check run by tools/interop.
//
//   node build/main.js decode EVENTS.bin OUT.json
//   node build/main.js encode-request MODEL_ID MESSAGE_ID PROMPT OUT.bin
//
// decode: EVENTS.bin holds model.v1.StreamEvent messages produced by the Python server, each
// preceded by its length as a base-128 varint (protobuf's size-delimited framing). Every event
// is decoded with the protoc-gen-es classes and written to OUT.json as
// {"events": [{"case": <oneof case>, "json": <proto3 JSON>, "binary": <base64 re-encoding>}]};
// tools/interop compares both with google's upb decoding of the same bytes.
//
// encode-request: builds a model.v1.StreamCompletionRequest (call_context, one user message
// with the given ULID id and text, thinking effort "low", at most 512 output tokens) and writes its binary encoding to OUT.bin;
// tools/interop sends those bytes unchanged to the Python server, which must accept them.
//
// Exit status: 0 on success, 1 on a decoding or usage error (the message says which).

import { readFileSync, writeFileSync } from "node:fs";
import { create, fromBinary, toBinary, toJson } from "@bufbuild/protobuf";
import { BinaryReader } from "@bufbuild/protobuf/wire";
import { CallContextSchema } from "./gen/common/v1/types_pb.js";
import { ContentBlockSchema, MessageSchema, Role } from "./gen/content/v1/types_pb.js";
import {
  GenerationParamsSchema,
  StreamCompletionRequestSchema,
  StreamEventSchema,
} from "./gen/model/v1/types_pb.js";

function readDelimited(data: Uint8Array): Uint8Array[] {
  const frames: Uint8Array[] = [];
  const reader = new BinaryReader(data);
  while (reader.pos < reader.len) {
    const size = reader.uint32();
    if (reader.pos + size > reader.len) {
      throw new Error(`truncated frame at byte ${reader.pos}: ${size} bytes announced`);
    }
    frames.push(data.subarray(reader.pos, reader.pos + size));
    reader.pos += size;
  }
  return frames;
}

function decode(eventsPath: string, outPath: string): void {
  const frames = readDelimited(new Uint8Array(readFileSync(eventsPath)));
  const events = frames.map((frame, index) => {
    const event = fromBinary(StreamEventSchema, frame);
    if (event.event.case === undefined) {
      throw new Error(`event ${index} has no oneof case set`);
    }
    return {
      case: event.event.case,
      json: toJson(StreamEventSchema, event),
      binary: Buffer.from(toBinary(StreamEventSchema, event)).toString("base64"),
    };
  });
  writeFileSync(outPath, JSON.stringify({ events }, null, 1));
  console.log(`decoded ${events.length} StreamEvents`);
}

function encodeRequest(modelId: string, messageId: string, prompt: string, outPath: string): void {
  const request = create(StreamCompletionRequestSchema, {
    modelId,
    callContext: create(CallContextSchema, { sessionId: "ts-session", turnId: "ts-turn-1" }),
    messages: [
      create(MessageSchema, {
        role: Role.USER,
        id: messageId,
        content: [
          create(ContentBlockSchema, { block: { case: "text", value: { text: prompt } } }),
        ],
      }),
    ],
    params: create(GenerationParamsSchema, { thinkingEffort: "low", maxOutputTokens: 512n }),
  });
  const bytes = toBinary(StreamCompletionRequestSchema, request);
  writeFileSync(outPath, bytes);
  console.log(`encoded a StreamCompletionRequest of ${bytes.length} bytes`);
}

function main(argv: string[]): number {
  const [command, ...rest] = argv;
  if (command === "decode" && rest.length === 2) {
    decode(rest[0]!, rest[1]!);
    return 0;
  }
  if (command === "encode-request" && rest.length === 4) {
    encodeRequest(rest[0]!, rest[1]!, rest[2]!, rest[3]!);
    return 0;
  }
  console.error(
    "usage: main.js decode EVENTS.bin OUT.json | encode-request MODEL_ID MESSAGE_ID PROMPT OUT.bin",
  );
  return 1;
}

try {
  process.exitCode = main(process.argv.slice(2));
} catch (error) {
  console.error(`interop (TypeScript): ${error instanceof Error ? error.message : String(error)}`);
  process.exitCode = 1;
}

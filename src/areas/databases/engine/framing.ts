// Length-prefixed JSON frames between the pool and an executor process: a 4-byte
// little-endian byte length, then that many bytes of UTF-8 JSON. No newline scan, no
// per-message handshake: one write per message, many messages per read.

/** One frame: header and JSON in a single buffer, so a message is one write. */
export function encodeFrame(msg: unknown): Buffer {
  const json = JSON.stringify(msg);
  const len = Buffer.byteLength(json);
  const buf = Buffer.allocUnsafe(4 + len);
  buf.writeUInt32LE(len, 0);
  buf.write(json, 4, 'utf8');
  return buf;
}

/**
 * Splits a byte stream into frames. Chunks are kept until a whole frame is there and
 * joined once, so a 16 MiB result arriving in 64 KiB reads is copied once, not 256 times.
 */
export class FrameReader {
  private chunks: Buffer[] = [];
  private bytes = 0;
  private need = 4;

  constructor(private readonly onFrame: (json: string) => void) {}

  push(chunk: Buffer): void {
    this.chunks.push(chunk);
    this.bytes += chunk.length;
    if (this.bytes < this.need) return;
    const data = this.chunks.length === 1 ? chunk : Buffer.concat(this.chunks, this.bytes);
    let off = 0;
    this.need = 4;
    while (data.length - off >= 4) {
      const len = data.readUInt32LE(off);
      if (data.length - off - 4 < len) {
        this.need = 4 + len;
        break;
      }
      this.onFrame(data.toString('utf8', off + 4, off + 4 + len));
      off += 4 + len;
    }
    if (off === data.length) {
      this.chunks = [];
      this.bytes = 0;
    } else {
      const rest = data.subarray(off);
      this.chunks = [rest];
      this.bytes = rest.length;
    }
  }
}

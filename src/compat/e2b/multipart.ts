// Just enough multipart/form-data for envd's upload (`file` parts whose filename is the target path,
// as E2B's SDK builds them with FormData). Parts are found by their boundary lines in the raw body.

export interface Part {
  name: string;
  filename?: string;
  data: Buffer;
}

export function boundaryOf(contentType: string | undefined): string | null {
  const m = /boundary=(?:"([^"]+)"|([^;\s]+))/i.exec(contentType ?? '');
  return m ? (m[1] ?? m[2] ?? null) : null;
}

/** FormData escapes `"`, CR and LF in names as %22, %0D and %0A. */
const unescapeName = (s: string) => s.replace(/%22/g, '"').replace(/%0D/gi, '\r').replace(/%0A/gi, '\n');

export function parseMultipart(body: Buffer, boundary: string): Part[] {
  const delim = Buffer.from(`--${boundary}`);
  const parts: Part[] = [];
  let at = body.indexOf(delim);
  while (at !== -1) {
    const start = at + delim.length;
    if (body.subarray(start, start + 2).toString() === '--') break;
    const next = body.indexOf(delim, start);
    if (next === -1) break;
    // Between the boundary's CRLF and the CRLF before the next boundary.
    const chunk = body.subarray(start + 2, next - 2);
    const headEnd = chunk.indexOf('\r\n\r\n');
    if (headEnd !== -1) {
      const head = chunk.subarray(0, headEnd).toString('utf8');
      const disp = /content-disposition:[^\r\n]*/i.exec(head)?.[0] ?? '';
      const name = /\bname="([^"]*)"/i.exec(disp)?.[1];
      const filename = /\bfilename="([^"]*)"/i.exec(disp)?.[1];
      if (name !== undefined) {
        parts.push({
          name: unescapeName(name),
          filename: filename === undefined ? undefined : unescapeName(filename),
          data: chunk.subarray(headEnd + 4),
        });
      }
    }
    at = next;
  }
  return parts;
}

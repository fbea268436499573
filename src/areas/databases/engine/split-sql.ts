/*
 * Splits SQL text into statements with the state machine of SQLite's sqlite3_complete()
 * (src/complete.c), so `CREATE TRIGGER ... BEGIN ...; ...; END;` stays one statement.
 * This is for running several statements sent in one `sql`; it grants nothing: every
 * piece is still compiled by SQLite under the authorizer.
 */

const Tk = { Semi: 0, Ws: 1, Other: 2, Explain: 3, Create: 4, Temp: 5, Trigger: 6, End: 7 } as const;
type Tk = (typeof Tk)[keyof typeof Tk];

// trans[state][token] -> state; state 1 (START) after a semicolon ends a statement.
const TRANS: number[][] = [
  [1, 0, 2, 3, 4, 2, 2, 2],
  [1, 1, 2, 3, 4, 2, 2, 2],
  [1, 2, 2, 2, 2, 2, 2, 2],
  [1, 3, 3, 2, 4, 2, 2, 2],
  [1, 4, 2, 2, 2, 4, 5, 2],
  [6, 5, 5, 5, 5, 5, 5, 5],
  [6, 6, 5, 5, 5, 5, 5, 7],
  [1, 7, 5, 5, 5, 5, 5, 5],
];

const KEYWORDS: Record<string, Tk> = {
  create: Tk.Create,
  temp: Tk.Temp,
  temporary: Tk.Temp,
  trigger: Tk.Trigger,
  end: Tk.End,
  explain: Tk.Explain,
};

/** Statements of `sql`, each without its trailing semicolon; pieces of only whitespace/comments are dropped. */
export function splitStatements(sql: string): string[] {
  // Hot path: a point query has no semicolon, and one statement needs no splitting.
  if (!sql.includes(';')) return [sql];
  const out: string[] = [];
  let state = 0;
  let start = 0;
  let meaningful = false;
  let i = 0;
  const n = sql.length;
  while (i < n) {
    const c = sql[i];
    let tk: Tk;
    let next = i + 1;
    const skipped = skippedEnd(sql, i);
    if (c === ';') tk = Tk.Semi;
    else if (c === ' ' || c === '\t' || c === '\n' || c === '\r' || c === '\f') tk = Tk.Ws;
    else if (skipped > i) {
      // A comment is whitespace; a string or quoted name is a token like any other.
      next = skipped;
      tk = c === '-' || c === '/' ? Tk.Ws : Tk.Other;
    } else if (/[A-Za-z_\u0080-\uffff]/.test(c)) {
      let j = i + 1;
      while (j < n && /[A-Za-z0-9_$\u0080-\uffff]/.test(sql[j])) j++;
      next = j;
      tk = KEYWORDS[sql.slice(i, j).toLowerCase()] ?? Tk.Other;
    } else tk = Tk.Other;
    if (tk !== Tk.Ws && tk !== Tk.Semi) meaningful = true;
    state = TRANS[state][tk];
    if (tk === Tk.Semi && state === 1) {
      if (meaningful) out.push(sql.slice(start, i).trim());
      start = next;
      meaningful = false;
    }
    i = next;
  }
  if (meaningful) out.push(sql.slice(start).trim());
  return out;
}

/**
 * End of the comment or quoted token (string, "name", `name`, [name]) starting at `i`, as SQLite's
 * tokenizer reads it (unterminated: the end of the text); `i` itself when none starts there.
 */
export function skippedEnd(sql: string, i: number): number {
  const c = sql[i];
  const n = sql.length;
  if (c === '-' && sql[i + 1] === '-') {
    const nl = sql.indexOf('\n', i);
    return nl < 0 ? n : nl + 1;
  }
  if (c === '/' && sql[i + 1] === '*') {
    const close = sql.indexOf('*/', i + 2);
    return close < 0 ? n : close + 2;
  }
  if (c === "'" || c === '"' || c === '`' || c === '[') {
    const q = c === '[' ? ']' : c;
    let j = i + 1;
    for (;;) {
      j = sql.indexOf(q, j);
      if (j < 0 || q === ']' || sql[j + 1] !== q) break;
      j += 2; // doubled quote inside a quoted token
    }
    return j < 0 ? n : j + 1;
  }
  return i;
}

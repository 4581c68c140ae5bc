// Whether SQL text contains a statement that ends or opens a transaction
// (BEGIN, START TRANSACTION, COMMIT, END, ROLLBACK but not ROLLBACK TO,
// ABORT, PREPARE TRANSACTION): the first keyword of every statement,
// skipping comments, quoted strings, quoted identifiers and dollar quotes.
// Text without a ';' is one statement: only its start is read.
const CONTROL = /(?:BEGIN|START\s+TRANSACTION|COMMIT|END|ABORT|PREPARE\s+TRANSACTION|ROLLBACK(?!\s+(?:AND\s+NO\s+CHAIN\s+)?TO\b))\b/iy;
const DOLLAR_TAG = /\$(?:[A-Za-z_\u0080-\uffff][A-Za-z0-9_\u0080-\uffff]*)?\$/y;

// -> index of the first character of the statement at i (white space and
// comments skipped)
function statementStart(text, i) {
  for (;;) {
    while (i < text.length && /\s|\(/.test(text[i])) i += 1;
    if (text.startsWith('--', i)) {
      const end = text.indexOf('\n', i);
      i = end < 0 ? text.length : end + 1;
    } else if (text.startsWith('/*', i)) {
      i = skipBlockComment(text, i);
    } else {
      return i;
    }
  }
}

function skipBlockComment(text, i) {
  let depth = 0;
  for (;;) {
    const open = text.indexOf('/*', i);
    const close = text.indexOf('*/', i);
    if (close < 0) return text.length;
    if (open >= 0 && open < close) {
      depth += 1;
      i = open + 2;
    } else {
      depth -= 1;
      i = close + 2;
      if (depth === 0) return i;
    }
  }
}

// -> the index after the quoted string starting at i (quote q), with ''
// inside; backslash escapes too in E'' strings
function skipQuoted(text, i, q, backslashes) {
  let j = i + 1;
  for (;;) {
    const end = text.indexOf(q, j);
    if (end < 0) return text.length;
    if (backslashes) {
      let n = 0;
      while (text[end - 1 - n] === '\\') n += 1;
      if (n % 2 === 1) { j = end + 1; continue; }
    }
    if (text[end + 1] === q) { j = end + 2; continue; }
    return end + 1;
  }
}

// is the statement starting at i transaction control? (the whole text is
// matched from i: white space between the words may be of any length)
function isControl(text, i) {
  CONTROL.lastIndex = i;
  return CONTROL.test(text);
}

export function endsTransaction(text) {
  let i = statementStart(text, 0);
  if (isControl(text, i)) return true;
  if (!text.includes(';')) return false;
  while (i < text.length) {
    const c = text[i];
    if (c === ';') {
      i = statementStart(text, i + 1);
      if (isControl(text, i)) return true;
    } else if (c === '\'') {
      const e = text[i - 1];
      i = skipQuoted(text, i, '\'', (e === 'E' || e === 'e') && !/[A-Za-z0-9_]/.test(text[i - 2] ?? ''));
    } else if (c === '"') {
      i = skipQuoted(text, i, '"', false);
    } else if (c === '-' && text[i + 1] === '-') {
      const end = text.indexOf('\n', i);
      i = end < 0 ? text.length : end + 1;
    } else if (c === '/' && text[i + 1] === '*') {
      i = skipBlockComment(text, i);
    } else if (c === '$' && !/[A-Za-z0-9_]/.test(text[i - 1] ?? '')) {
      DOLLAR_TAG.lastIndex = i;
      const tag = DOLLAR_TAG.exec(text);
      if (tag) {
        const end = text.indexOf(tag[0], i + tag[0].length);
        i = end < 0 ? text.length : end + tag[0].length;
      } else {
        i += 1;
      }
    } else {
      i += 1;
    }
  }
  return false;
}

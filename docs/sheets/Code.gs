/**
 * formrelay → Google Sheets: appends every submission as a row.
 *
 * Paste this into Extensions > Apps Script of the spreadsheet, set TOKEN, and
 * deploy it as a web app (see README.md beside this file). formrelay POSTs the
 * submission envelope as JSON to the web app URL; this script appends one row:
 *
 *   submissionId | submittedAt | origin | ip | userAgent | referer | <payload fields…>
 *
 * Row 1 is the header. A payload field seen for the first time gets a new
 * column at the end. A payload that is not an object goes into a "payload"
 * column as JSON; array values are joined with ", ".
 */

/**
 * Shared secret: formrelay must call the web app URL with `?token=<TOKEN>`.
 * Request headers (Authorization too) do not reach Apps Script, so the secret
 * travels in the URL. A script property named TOKEN (Project Settings > Script
 * properties) takes precedence over this value. Empty = no check (not recommended).
 */
const TOKEN = "";

/** Name of the sheet (tab) to write to; empty = the first sheet. */
const SHEET_NAME = "";

/**
 * Skip a submission whose submissionId is already in the sheet. formrelay
 * retries when it misses the answer, and Apps Script writes the row before it
 * answers, so without this check a retry can append the same submission twice.
 */
const SKIP_DUPLICATES = true;

const FIXED_COLUMNS = ["submissionId", "submittedAt", "origin", "ip", "userAgent", "referer"];

function doPost(e) {
  const expected = PropertiesService.getScriptProperties().getProperty("TOKEN") || TOKEN;
  if (expected && (!e || !e.parameter || e.parameter.token !== expected)) {
    return json({ ok: false, error: "Invalid token" });
  }

  let envelope;
  try {
    envelope = JSON.parse(e.postData.contents);
  } catch (error) {
    return json({ ok: false, error: "Invalid JSON body" });
  }
  if (!envelope || typeof envelope !== "object" || !envelope.submissionId) {
    return json({ ok: false, error: "Not a formrelay submission" });
  }

  const fields = payloadFields(envelope.payload);
  const metadata = envelope.metadata || {};
  const values = {
    submissionId: envelope.submissionId,
    submittedAt: metadata.submittedAt,
    origin: metadata.origin,
    ip: metadata.ip,
    userAgent: metadata.userAgent,
    referer: metadata.referer,
  };

  // One writer at a time: two submissions with new fields must not both
  // extend the header, and the duplicate check must see every earlier row.
  const lock = LockService.getScriptLock();
  lock.waitLock(30000);
  try {
    const sheet = targetSheet();
    if (SKIP_DUPLICATES && alreadyWritten(sheet, String(envelope.submissionId))) {
      return json({ ok: true, duplicate: true });
    }

    const header = readHeader(sheet);
    const columns = Object.create(null);
    for (const name of Object.keys(fields)) {
      // A payload field named like a fixed column gets its own "payload.<name>" column.
      const column = FIXED_COLUMNS.indexOf(name) === -1 ? name : "payload." + name;
      columns[column] = fields[name];
      if (header.indexOf(column) === -1) header.push(column);
    }
    sheet.getRange(1, 1, 1, header.length).setValues([header.map(cell)]);

    const row = header.map((column) =>
      cell(FIXED_COLUMNS.indexOf(column) !== -1 ? values[column] : columns[column])
    );
    sheet.appendRow(row);
    SpreadsheetApp.flush();
  } finally {
    lock.releaseLock();
  }
  return json({ ok: true });
}

/** The payload as named fields: an object's own keys, anything else as "payload". */
function payloadFields(payload) {
  if (payload !== null && typeof payload === "object" && !Array.isArray(payload)) return payload;
  return { payload: payload === undefined ? "" : JSON.stringify(payload) };
}

function targetSheet() {
  const spreadsheet = SpreadsheetApp.getActiveSpreadsheet();
  const sheet = SHEET_NAME ? spreadsheet.getSheetByName(SHEET_NAME) : spreadsheet.getSheets()[0];
  if (!sheet) throw new Error('Sheet "' + SHEET_NAME + '" not found');
  return sheet;
}

/** The header row, or the fixed columns for an empty sheet. */
function readHeader(sheet) {
  const width = sheet.getLastColumn();
  if (sheet.getLastRow() === 0 || width === 0) return FIXED_COLUMNS.slice();
  const header = sheet.getRange(1, 1, 1, width).getValues()[0].map((name) =>
    String(name).replace(/^'/, "")
  );
  while (header.length > 0 && header[header.length - 1] === "") header.pop();
  for (const column of FIXED_COLUMNS) {
    if (header.indexOf(column) === -1) header.push(column);
  }
  return header;
}

function alreadyWritten(sheet, submissionId) {
  if (sheet.getLastRow() < 2) return false;
  const index = readHeader(sheet).indexOf("submissionId");
  if (index === -1) return false;
  const found = sheet
    .getRange(2, index + 1, sheet.getLastRow() - 1, 1)
    .createTextFinder(submissionId)
    .matchEntireCell(true)
    .findNext();
  return found !== null;
}

/**
 * One cell: arrays joined, objects as JSON, null empty. Text gets a leading
 * apostrophe, which Sheets hides and which keeps it text as sent: a submitted
 * "=IMPORTDATA(…)" is not run as a formula, "007" keeps its zeros and
 * "2025-01-02" does not turn into a date. Numbers and booleans stay as they are.
 */
function cell(value) {
  if (value === null || value === undefined) return "";
  if (Array.isArray(value)) {
    value = value.map((item) => (item !== null && typeof item === "object" ? JSON.stringify(item) : String(item)))
      .join(", ");
  } else if (typeof value === "object") {
    value = JSON.stringify(value);
  }
  return typeof value === "string" ? "'" + value : value;
}

function json(body) {
  return ContentService.createTextOutput(JSON.stringify(body)).setMimeType(
    ContentService.MimeType.JSON,
  );
}

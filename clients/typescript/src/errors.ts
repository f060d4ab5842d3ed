// The API's error kinds as classes: every error answer of a node becomes
// the LeaseholdError subclass of its `code` (the body's code wins over
// the status, so a 409 is LeaseLostError or ConflictError as the node
// said). Check with instanceof or by `code`.

/** The error codes of the API (`{"error":{"code"}}`), plus internal. */
export type ErrorCode =
  | "bad_request"
  | "unauthorized"
  | "forbidden"
  | "not_found"
  | "lease_lost"
  | "conflict"
  | "too_large"
  | "unprocessable"
  | "no_space"
  | "unavailable"
  | "internal";

/** An error of the API: what a node answered, or could not answer. */
export class LeaseholdError extends Error {
  /** The error's kind, as the API names it. */
  readonly code: ErrorCode;
  /** The HTTP status, 0 when the node was not reached. */
  readonly status: number;
  /** The call that failed, e.g. "POST /api/v1/leases". */
  readonly call: string;

  constructor(code: ErrorCode, message: string, status = 0, call = "", options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
    this.status = status;
    this.call = call;
    this.name = new.target.name;
  }
}

/** 400: a malformed body, path, query or header. */
export class BadRequestError extends LeaseholdError {}
/** 401: a missing or wrong token. */
export class UnauthorizedError extends LeaseholdError {}
/** 403: a right token on the wrong kind of endpoint. */
export class ForbiddenError extends LeaseholdError {}
/** 404: no such node, group, range or endpoint. */
export class NotFoundError extends LeaseholdError {}
/** 409 lease_lost: the caller does not hold the group at that fence; nothing changed. */
export class LeaseLostError extends LeaseholdError {}
/** 409 conflict: the state forbids it (a name taken, a group held, done ranges to replan). */
export class ConflictError extends LeaseholdError {}
/** 413: the body is over its limit. */
export class TooLargeError extends LeaseholdError {}
/** 422: well formed, but it cannot be done (progress backwards, marks inconsistent). */
export class UnprocessableError extends LeaseholdError {}
/** 507: the node's disk is full. */
export class NoSpaceError extends LeaseholdError {}
/** 503, or the node was not reached: retry later. */
export class UnavailableError extends LeaseholdError {}
/** 500, or an answer the client cannot read. */
export class InternalError extends LeaseholdError {}

const classes: Record<ErrorCode, typeof LeaseholdError> = {
  bad_request: BadRequestError,
  unauthorized: UnauthorizedError,
  forbidden: ForbiddenError,
  not_found: NotFoundError,
  lease_lost: LeaseLostError,
  conflict: ConflictError,
  too_large: TooLargeError,
  unprocessable: UnprocessableError,
  no_space: NoSpaceError,
  unavailable: UnavailableError,
  internal: InternalError,
};

const codeByStatus: Record<number, ErrorCode> = {
  400: "bad_request",
  401: "unauthorized",
  403: "forbidden",
  404: "not_found",
  409: "conflict",
  413: "too_large",
  416: "bad_request",
  422: "unprocessable",
  507: "no_space",
  503: "unavailable",
};

/** makeError builds the error of a code. */
export function makeError(code: ErrorCode, message: string, status = 0, call = "", cause?: unknown): LeaseholdError {
  const C = classes[code] ?? InternalError;
  return new C(code, message, status, call, cause === undefined ? undefined : { cause });
}

/** errorFromAnswer reads an error answer's body (already read as text). */
export function errorFromAnswer(status: number, body: string, call: string): LeaseholdError {
  let code: string | undefined;
  let message: string | undefined;
  try {
    const wire = JSON.parse(body) as { error?: { code?: string; message?: string } };
    code = wire?.error?.code;
    message = wire?.error?.message;
  } catch {
    // A proxy's page, or a text answer: the status says what happened.
  }
  const known = code !== undefined && code in classes ? (code as ErrorCode) : undefined;
  const c = known ?? codeByStatus[status] ?? "internal";
  return makeError(c, message || `${call}: ${status}`, status, call);
}

/**
 * PermanentError marks an index error that retrying the range will not
 * mend: the Worker fails the range at once instead of asking for a retry.
 */
export class PermanentError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "PermanentError";
  }
}

/** permanent marks err as permanent. */
export function permanent(err: unknown): PermanentError {
  if (err instanceof PermanentError) return err;
  return new PermanentError(err instanceof Error ? err.message : String(err), { cause: err });
}

/** S3's errors on the wire: the XML error document and the codes the SDK turns into its exceptions. */
/** An S3 error answer; never leaves this module (the handler turns it into XML). */
export class S3Failure extends Error {
  override readonly name = 'S3Failure';

  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly headers: Readonly<Record<string, string>> = {},
  ) {
    super(message);
  }
}

export const noSuchBucket = () => new S3Failure(404, 'NoSuchBucket', 'The specified bucket does not exist');
/** `headers`: a current delete marker's (`x-amz-delete-marker`, `x-amz-version-id`), as S3 sends them. */
export const noSuchKey = (headers: Record<string, string> = {}) =>
  new S3Failure(404, 'NoSuchKey', 'The specified key does not exist.', headers);
export const noSuchVersion = () =>
  new S3Failure(404, 'NoSuchVersion', 'The specified version does not exist.');
/** What S3 answers a GET or HEAD of a delete marker by its version id. */
export const methodNotAllowed = (headers: Record<string, string> = {}) =>
  new S3Failure(
    405,
    'MethodNotAllowed',
    'The specified method is not allowed against this resource.',
    headers,
  );
/**
 * A version whose bytes were changed or removed on disk outside S3 (the plain file was edited in
 * place, or a file of the first layout changed before it was moved to the versioned one). S3 never
 * loses a version's bytes; the stand-in still lists the version, but has nothing to serve.
 */
export const bytesLost = () =>
  new S3Failure(
    500,
    'InternalError',
    'The bytes of this version were changed on disk outside S3, so the disk S3 stand-in lists the version but cannot serve it.',
  );
export const noSuchUpload = () =>
  new S3Failure(
    404,
    'NoSuchUpload',
    'The specified upload does not exist. The upload ID may be invalid, or the upload may have been aborted or completed.',
  );
export const preconditionFailed = () =>
  new S3Failure(412, 'PreconditionFailed', 'At least one of the pre-conditions you specified did not hold');
export const invalidArgument = (message: string) => new S3Failure(400, 'InvalidArgument', message);
export const invalidRequest = (message: string) => new S3Failure(400, 'InvalidRequest', message);
export const malformedXml = () =>
  new S3Failure(
    400,
    'MalformedXML',
    'The XML you provided was not well-formed or did not validate against our published schema.',
  );
export const notImplemented = (what: string) =>
  new S3Failure(501, 'NotImplemented', `${what} is not implemented by the disk S3 stand-in.`);
export const invalidPart = () =>
  new S3Failure(
    400,
    'InvalidPart',
    "One or more of the specified parts could not be found. The part may not have been uploaded, or the specified entity tag may not match the part's entity tag.",
  );
// A file cannot also be a folder, so `a` and `a/b` cannot both exist on disk (S3 would allow it).
export const keyConflict = () =>
  invalidArgument(
    'The key collides with an existing key on disk: one key cannot also be a folder of other keys in the disk S3 stand-in.',
  );

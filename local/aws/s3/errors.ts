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
export const noSuchKey = () => new S3Failure(404, 'NoSuchKey', 'The specified key does not exist.');
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

/** The object tag that tells the archive bucket's lifecycle rules which retention applies. */
export const REQUEST_TYPE_TAG = 'request-type';

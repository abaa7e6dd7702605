/**
 * The warning `svc-dsr package` prints when the package it hands out still states placeholder
 * texts (`Example Controller`, `privacy@example.invalid`, "Placeholder: ..."): which settings are
 * unset and where to set them, so nobody sends such a package to a subject as the answer.
 */

/** The warning for a package's `placeholder_texts`, or undefined when it has none. */
export function placeholderWarning(texts: readonly string[] | undefined): string | undefined {
  if (texts === undefined || texts.length === 0) return undefined;
  return (
    `package: warning: this package states placeholder texts, not yours: ${texts.join(', ')} ${texts.length === 1 ? 'is' : 'are'} unset. ` +
    'Set them in the stack configuration (cdk.json context "svc-dsr", or the file given to --config; docs/deploy.md, "controllerName", "controllerContact", "accessNotice"), ' +
    'then build the package again (a new request) before giving it to the subject\n'
  );
}

// Types of the Unicode data packages that ship none: read as unknown and checked with zod where used.
declare module 'unicode-property-value-aliases-ecmascript' {
  /** Unicode property -> (value alias -> canonical value), from PropertyValueAliases.txt. */
  const propertyValueAliases: unknown;
  export default propertyValueAliases;
}

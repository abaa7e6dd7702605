/**
 * Runtime gaps between Node 20 and the libraries the local mode loads. Import this module before
 * aws-local-stepfunctions: its Task states call `Promise.withResolvers`, which Node 20 lacks.
 */

interface Resolvers<T> {
  promise: Promise<T>;
  resolve: (value: T | PromiseLike<T>) => void;
  reject: (reason?: unknown) => void;
}

if (!('withResolvers' in Promise)) {
  Object.defineProperty(Promise, 'withResolvers', {
    configurable: true,
    writable: true,
    value: function withResolvers<T>(): Resolvers<T> {
      let resolve: Resolvers<T>['resolve'] = () => {};
      let reject: Resolvers<T>['reject'] = () => {};
      const promise = new Promise<T>((onResolve, onReject) => {
        resolve = onResolve;
        reject = onReject;
      });
      return { promise, resolve, reject };
    },
  });
}

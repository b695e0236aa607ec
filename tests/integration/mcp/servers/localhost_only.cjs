// Preloaded into the npm "everything" server (node --require): its HTTP transport listens on every
// interface; this makes a listen(port) bind 127.0.0.1 only.
const net = require("net");
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  if (typeof args[0] === "number" || (typeof args[0] === "string" && /^\d+$/.test(args[0]))) {
    const callback = typeof args[args.length - 1] === "function" ? args[args.length - 1] : undefined;
    return listen.call(this, { port: Number(args[0]), host: "127.0.0.1" }, callback);
  }
  return listen.apply(this, args);
};

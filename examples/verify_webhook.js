// Verifying a signoff decision webhook in JavaScript with the Standard Webhooks library
// (`npm install standardwebhooks`). In an HTTP server, pass the raw body (e.g. Express's
// `express.raw({ type: "application/json" })`) and the request's headers.
//
//   node examples/verify_webhook.js BODY_FILE HEADERS_JSON_FILE
//
// with SIGNOFF_WEBHOOK_SECRET=whsec_... set; prints the webhook id and the approval's state,
// or exits 1 saying why the webhook does not verify.
const fs = require("fs");
const { Webhook } = require("standardwebhooks");

const [bodyFile, headersFile] = process.argv.slice(2);
const body = fs.readFileSync(bodyFile, "utf8");
const headers = JSON.parse(fs.readFileSync(headersFile, "utf8"));

try {
  const event = new Webhook(process.env.SIGNOFF_WEBHOOK_SECRET).verify(body, headers);
  // Dedupe on webhook-id: delivery is at least once.
  console.log(headers["webhook-id"], event.approval.state);
} catch (err) {
  console.error(`webhook does not verify: ${err.message}`);
  process.exit(1);
}

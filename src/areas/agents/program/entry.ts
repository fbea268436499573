// The program bundled into every agent's sandbox: nube's own ACP agent (`acp`, `code-agent`) or, for
// the `goose` template, the relay to goose. One bundle for all: the kind is chosen at start.
if (process.env.NUBE_AGENT_KIND === 'goose') void import('./goose-relay.js');
else void import('./main.js');

// xterm.js wired to the sandboxes.terminal WebSocket through the SDK's openTerminal.
import { FitAddon } from '@xterm/addon-fit';
import { Terminal as XTerm } from '@xterm/xterm';
import '@xterm/xterm/css/xterm.css';
import { useEffect, useRef, useState } from 'preact/hooks';
import { nube, terminalProtocols } from './api.js';

export function TerminalView({ sandboxId }: { sandboxId: string }) {
  const box = useRef<HTMLDivElement>(null);
  const [status, setStatus] = useState('connecting…');
  useEffect(() => {
    const term = new XTerm({ cursorBlink: true, fontSize: 14, convertEol: false, screenReaderMode: false });
    const fit = new FitAddon();
    term.loadAddon(fit);
    term.open(box.current!);
    fit.fit();
    const t = nube.openTerminal(sandboxId, { rows: term.rows, cols: term.cols, protocols: terminalProtocols() });
    const decoder = new TextDecoder();
    t.ready.then(
      () => {
        setStatus('connected');
        term.focus();
      },
      (e: Error) => setStatus(e.message),
    );
    t.onData((d) => term.write(decoder.decode(d, { stream: true })));
    t.onExit((code) => setStatus(code === null ? 'disconnected' : `shell exited with status ${code}`));
    const input = term.onData((d) => t.write(d));
    const resize = term.onResize(({ rows, cols }) => t.resize(rows, cols));
    const ro = new ResizeObserver(() => fit.fit());
    ro.observe(box.current!);
    return () => {
      ro.disconnect();
      input.dispose();
      resize.dispose();
      t.close();
      term.dispose();
    };
  }, [sandboxId]);
  return (
    <div class="terminal-wrap">
      <p class="hint" aria-live="polite">
        Terminal: {status}
      </p>
      <div class="terminal" ref={box} role="application" aria-label="Terminal into the sandbox" data-testid="terminal" />
    </div>
  );
}

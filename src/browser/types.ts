/** Page sizes the PDF export knows (the names Chromium's printToPDF takes). */
export const PDF_FORMATS = ['A4', 'Letter', 'Legal', 'A3', 'A5', 'Tabloid'] as const;
export type PdfFormat = (typeof PDF_FORMATS)[number];

/** An asset nube serves to the page being rendered (an image of the document, say). */
export interface Asset {
  body: Buffer;
  contentType: string;
}

export interface PdfJob {
  /** A whole HTML document. Relative URLs resolve against `ASSET_ORIGIN`. */
  html: string;
  format: PdfFormat;
  /**
   * Answers requests for `ASSET_ORIGIN/<path>`; null is a 404. Every other request the page makes is
   * refused before it leaves the browser.
   */
  asset?: (path: string) => Promise<Asset | null>;
  /** Gives up (and recycles the page) after this long; default 30 s. */
  timeoutMs?: number;
}

/** A request a rendered page makes, handed to the caller to fetch (through nube's outbound guard). */
export interface PageRequest {
  url: string;
  method: string;
  headers: Record<string, string>;
  body: Buffer | null;
}

export interface PageAnswer {
  status: number;
  headers: Record<string, string>;
  body: Buffer;
}

export interface RenderJob {
  url: string;
  /** Fetches every request the page makes (its own document included); a throw fails that request. */
  fetch(req: PageRequest, budget: number): Promise<PageAnswer>;
  /** Bytes all the page's answers may add up to; past it further requests fail. */
  maxBytes: number;
  timeoutMs: number;
}

export interface RenderedPage {
  /** URL of the page after redirects and scripts. */
  url: string;
  /** The DOM serialized after scripts ran (network quiet, or the time cap). */
  html: string;
  /** Requests the page made, and those refused (guard, budget). */
  requests: number;
  refused: number;
}

export interface BrowserStats {
  running: boolean;
  launches: number;
  renders: number;
  pagesIdle: number;
  pagesBusy: number;
  /** Memory (PSS) of the browser's processes at the last check, bytes. */
  memoryBytes: number;
}

/**
 * A real browser that turns HTML into PDF. One warm browser per nube process; implementations keep a
 * pool of pages, restart a crashed browser, and cap its memory.
 */
export interface Browser {
  pdf(job: PdfJob): Promise<Buffer>;
  /** A web page with JavaScript on, in a context of its own that keeps nothing afterwards. */
  render(job: RenderJob): Promise<RenderedPage>;
  stats(): BrowserStats;
  close(): Promise<void>;
}

/**
 * The origin documents are rendered at. Never resolved by DNS: requests to it are answered by nube
 * from memory, and every other request is refused.
 */
export const ASSET_ORIGIN = 'http://document.nube.invalid';

/** The browser could not be started (missing binary, no memory): the export cannot run now. */
export class BrowserUnavailable extends Error {
  override name = 'BrowserUnavailable';
}

/** A render went past its deadline; its page was closed. */
export class RenderTimeout extends Error {
  override name = 'RenderTimeout';
}

// The event names of the spec's Events section: the only values a webhook may subscribe to.

export const EVENT_NAMES = [
  'file.created',
  'file.updated',
  'file.deleted',
  'file.restored',
  'website.created',
  'website.deleted',
  'workspace.created',
  'workspace.deleted',
  'database.created',
  'database.deleted',
  'form.submitted',
  'payment.paid',
  'broadcast.sent',
  'turn.completed',
  'turn.failed',
] as const;

export type EventName = (typeof EVENT_NAMES)[number];

export const EVENT_DESCRIPTIONS: Record<EventName, string> = {
  'file.created': 'a new file is uploaded',
  'file.updated': 'file name, access or metadata changed',
  'file.deleted': 'file soft-deleted',
  'file.restored': 'file restored from trash',
  'website.created': 'website created',
  'website.deleted': 'website deleted',
  'workspace.created': 'workspace created',
  'workspace.deleted': 'workspace deleted',
  'database.created': 'database created',
  'database.deleted': 'database deleted',
  'form.submitted': 'a form was submitted',
  'payment.paid': 'a payment link or a machine order was paid (data.kind: link, create or launch)',
  'broadcast.sent': 'a broadcast was sent',
  'turn.completed': 'a fleet agent finished a turn',
  'turn.failed': 'a turn ended with no reply (no capacity, rate limited or worker error)',
};

import { z } from 'zod';
import { CursorPage } from '../../platform/cursor-page.js';
import { defineOperation } from '../../platform/operation.js';
import { FreeObject, FreeObjectInput, IsoTime, idParam, Ok, PageQuery } from '../../platform/schemas.js';
import type { PaymentLinksService } from './service.js';

declare module '../../platform/operation.js' {
  interface Services {
    paymentLinks: PaymentLinksService;
  }
}

const tags = ['Payment links'];
const LinkId = idParam('linkId', 'Payment link id');

const PaymentLink = z
  .object({
    id: z.string(),
    url: z
      .string()
      .describe(
        'The page to hand to payers (`/pay/<token>`); opening it is the only credential needed to pay',
      ),
    amountCentavos: z.number().int(),
    currency: z.literal('MXN'),
    description: z.string(),
    redirectUrl: z
      .string()
      .nullable()
      .describe("Where payers land after paying (hosted checkout); null: nube's thank-you page"),
    metadata: FreeObject,
    maxPayments: z.number().int().nullable().describe('Payments it takes before it closes; null: no limit'),
    paymentsCount: z.number().int(),
    status: z.enum(['active', 'completed']).describe('`completed` once it took maxPayments payments'),
    provider: z
      .enum(['stripe', 'builtin'])
      .describe("Who takes the payment: Stripe Checkout, or nube's own page confirmed by the operator"),
    createdAt: IsoTime,
  })
  .meta({ id: 'PaymentLink', description: 'A link that takes a payment in MXN' });

const Payment = z
  .object({
    id: z.string(),
    linkId: z.string(),
    amountCentavos: z.number().int(),
    currency: z.string(),
    provider: z.string(),
    providerReference: z
      .string()
      .describe("The provider's id of the checkout (a Stripe Checkout Session id)"),
    email: z.string().nullable().describe("The payer's email when the provider gave it"),
    createdAt: IsoTime,
    paidAt: IsoTime.nullable(),
  })
  .meta({ id: 'LinkPayment', description: 'A payment taken through a payment link' });

const httpUrl = z
  .string()
  .max(2000)
  .refine((v) => {
    try {
      return ['http:', 'https:'].includes(new URL(v).protocol);
    } catch {
      return false;
    }
  }, 'must be an http or https URL');

export const paymentsOperations = [
  defineOperation({
    id: 'paymentLinks.create',
    method: 'POST',
    path: '/payment-links',
    summary: 'Create a payment link: a page that takes a payment in MXN',
    description:
      'Hand `url` to payers. With Stripe configured (`NUBE_STRIPE_SECRET_KEY`) the page sends them to Stripe ' +
      "Checkout; otherwise it is nube's own page, where the operator confirms a payment settled outside. " +
      'Each payment sends `payment.paid` once. A link takes one payment unless `maxPayments` says otherwise (null: no limit).',
    tags,
    auth: ['owner'],
    body: z
      .object({
        amountCentavos: z
          .number()
          .int()
          .min(1000)
          .max(99_999_999)
          .describe('Amount in centavos, MXN 10.00 to 999,999.99'),
        currency: z.literal('MXN').default('MXN'),
        description: z.string().trim().min(1).max(500).describe('What is paid for; shown to the payer'),
        redirectUrl: httpUrl.optional().describe('Where payers land after paying'),
        metadata: FreeObjectInput.optional().describe('Yours; comes back on the link and in payment.paid'),
        maxPayments: z
          .number()
          .int()
          .min(1)
          .max(1_000_000)
          .nullable()
          .optional()
          .describe('Payments it takes (default 1); null: no limit'),
      })
      .strict(),
    successStatus: 201,
    response: PaymentLink,
    handler: ({ principal, body, services }) => services.paymentLinks.create(principal, body),
  }),
  defineOperation({
    id: 'paymentLinks.list',
    method: 'GET',
    path: '/payment-links',
    summary: 'List payment links, newest first',
    description: 'Cursor pagination: pass `nextCursor` back as `cursor`.',
    tags,
    auth: ['owner'],
    query: PageQuery,
    response: CursorPage(PaymentLink),
    handler: ({ principal, query, services }) => services.paymentLinks.list(principal, query),
  }),
  defineOperation({
    id: 'paymentLinks.get',
    method: 'GET',
    path: '/payment-links/{linkId}',
    summary: 'Get a payment link',
    tags,
    auth: ['owner'],
    params: LinkId,
    response: PaymentLink,
    handler: ({ principal, params, services }) => services.paymentLinks.get(principal, params.linkId),
  }),
  defineOperation({
    id: 'paymentLinks.delete',
    method: 'DELETE',
    path: '/payment-links/{linkId}',
    summary: 'Delete a payment link: its page stops taking payments at once',
    tags,
    auth: ['owner'],
    params: LinkId,
    response: Ok,
    handler: ({ principal, params, services }) => services.paymentLinks.delete(principal, params.linkId),
  }),
  defineOperation({
    id: 'paymentLinks.payments',
    method: 'GET',
    path: '/payment-links/{linkId}/payments',
    summary: "List a payment link's payments, newest first",
    description: 'Only completed payments. Cursor pagination: pass `nextCursor` back as `cursor`.',
    tags,
    auth: ['owner'],
    params: LinkId,
    query: PageQuery,
    response: CursorPage(Payment),
    handler: ({ principal, params, query, services }) =>
      services.paymentLinks.payments(principal, params.linkId, query),
  }),
];

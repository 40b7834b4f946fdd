/**
 * A pipeline config file (YAML or JSON): the pipeline definition (src/schema/pipeline.ts), the
 * workers' task queue and the connections. The published JSON Schema,
 * schema/pipeline-config.schema.json (for editors), is generated from this schema by
 * `npm run schema` (scripts/schema.ts); a unit test fails when the committed file differs.
 */
import { z } from 'zod';
import { pipelineSchema } from './pipeline';
import { strictObject } from './problems';

const file = (description: string) => z.string().describe(description);
const PASSWORD_ENV = 'name of the environment variable holding the password';
/** TLS: on by `enabled` or by any file; relative paths are taken from the config file's folder. */
const TLS_FILES = {
  enabled: z
    .boolean()
    .optional()
    .describe("TLS without files (the system's trusted CAs); any file below turns TLS on too"),
  caFile: file("PEM file of the CA(s) to trust; relative paths are taken from this file's folder").optional(),
  certFile: file('PEM client certificate (mutual TLS)').optional(),
  keyFile: file('PEM key of the client certificate').optional(),
};
/** TLS to a server whose certificate is checked against `serverName` when given. */
const tls = (serverName: string) =>
  strictObject({ ...TLS_FILES, serverName: z.string().optional().describe(serverName) });

/** What the CLI connects to; written over the environment (connectionSettings in src/config/connections-file.ts), never into history. */
const connections = strictObject({
  temporal: strictObject({
    address: z.string().optional(),
    namespace: z.string().optional(),
    webUi: z.string().optional().describe("base URL of the Temporal Web UI; default: port 8233 on the address's host"),
    tls: tls("name to check the server's certificate against, when it differs from the address's host").optional(),
    apiKeyFile: file('file holding an API key (e.g. Temporal Cloud); implies TLS').optional(),
    apiKeyEnv: z.string().optional().describe('name of the environment variable holding an API key'),
  }).optional(),
  kafka: strictObject({
    brokers: z.array(z.string()).optional(),
    replicationFactor: z
      .int()
      .optional()
      .describe(
        "replication factor of the topics onceflow creates; -1 (default): the broker's default.replication.factor",
      ),
    ssl: tls("name to check the brokers' certificates against").optional(),
    sasl: strictObject({
      mechanism: z
        .enum(['plain', 'scram-sha-256', 'scram-sha-512', 'oauthbearer'])
        .optional()
        .describe('oauthbearer needs a token provider given in code (loadSettings hooks)'),
      username: z.string().optional(),
      passwordFile: file('file holding the password').optional(),
      passwordEnv: z.string().optional().describe(PASSWORD_ENV),
      plaintext: z
        .boolean()
        .optional()
        .describe(
          'true: plain or oauthbearer without TLS (a SASL_PLAINTEXT listener), which sends the secret unencrypted',
        ),
    }).optional(),
  }).optional(),
  mysql: strictObject({
    host: z.string().optional(),
    port: z.int().optional(),
    database: z.string().optional(),
    user: z.string().optional(),
    password: z.string().optional().describe('prefer passwordEnv or passwordFile'),
    passwordEnv: z.string().optional().describe(PASSWORD_ENV),
    passwordFile: file('file holding the password').optional(),
    ssl: strictObject({
      ...TLS_FILES,
      minVersion: z
        .enum(['TLSv1.2', 'TLSv1.3'])
        .optional()
        .describe('default TLSv1.2; with TLS configured onceflow never falls back to plaintext'),
    }).optional(),
  }).optional(),
});

export const configFileSchema = strictObject({
  pipeline: pipelineSchema,
  taskQueue: z
    .string()
    .optional()
    .describe("task queue of the workers that run this pipeline (default ONCEFLOW_TASK_QUEUE or 'onceflow')"),
  connections: connections.optional(),
}).meta({
  $id: 'https://onceflow.dev/schema/pipeline-config.schema.json',
  title: 'onceflow pipeline config',
  description:
    'The file `onceflow start <config>` reads (YAML or JSON). `pipeline` travels through workflow history and must hold no secrets; `connections` is used by the CLI only and never enters history, memo or logs.',
});

/** The JSON Schema of config files, as published in schema/pipeline-config.schema.json. */
function configJsonSchema(): Record<string, unknown> {
  const { $schema, $id, title, description, ...rest } = z.toJSONSchema(configFileSchema, {
    io: 'input',
    target: 'draft-2020-12',
  });
  return { $schema, $id, title, description, ...rest };
}

/** Where the generated JSON Schema is published, from the package root (shipped in the package). */
export const CONFIG_JSON_SCHEMA_FILE = 'schema/pipeline-config.schema.json';

/** The text of {@link CONFIG_JSON_SCHEMA_FILE}. */
export const configJsonSchemaText = () => `${JSON.stringify(configJsonSchema(), null, 2)}\n`;

/**
 * `npm run schema`: writes schema/pipeline-config.schema.json, the JSON Schema editors use for
 * config files, from the zod schema it is generated from (src/schema/config-file.ts). Run it
 * after changing a field; a unit test fails while the committed file differs.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { configJsonSchemaText, CONFIG_JSON_SCHEMA_FILE } from '../src/schema/config-file';

const out = join(__dirname, '..', CONFIG_JSON_SCHEMA_FILE);
writeFileSync(out, configJsonSchemaText());
console.log(`wrote ${CONFIG_JSON_SCHEMA_FILE}`);

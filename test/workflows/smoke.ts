// A one-activity workflow for the Temporal smoke test.
import { proxyActivities } from '@temporalio/workflow';

const { greet } = proxyActivities<{ greet(name: string): Promise<string> }>({ startToCloseTimeout: '10s' });

export async function smokeWorkflow(name: string): Promise<string> {
  return greet(name);
}

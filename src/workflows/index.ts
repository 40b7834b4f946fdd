// Entry point of the workflow bundle: only workflow functions are exported here.
export { partitionWorkflow } from './partition';
export { pipelineWorkflow } from './pipeline';
export { groupWorkflow } from './group';

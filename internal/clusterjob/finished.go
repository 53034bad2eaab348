package clusterjob

import batchv1 "k8s.io/api/batch/v1"

// Finished says whether job has ended, as its terminal conditions say:
// Complete, Failed, or FailureTarget (which precedes Failed while the
// Job controller stops its pods). A Job that has not may still start or
// run a pod.
func Finished(job *batchv1.Job) bool {
	return jobCondition(job, batchv1.JobComplete) || jobCondition(job, batchv1.JobFailed) || jobCondition(job, batchv1.JobFailureTarget)
}

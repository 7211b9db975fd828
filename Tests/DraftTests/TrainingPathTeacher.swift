// The teacher on the training model's no-grad forward (batch 1, whole sequence): the reference
// that the KV-cache teacher distillation runs on (PrefixTeacher) is checked against.
import Autograd
import Distillation
import ModelAssets
import Training

final class TrainingPathTeacher: TeacherForward {
    let model: LlamaModel
    init(_ model: LlamaModel) { self.model = model }
    var config: ModelConfig { model.config }

    func hiddenStates(_ ids: [Int]) -> [Float] {
        var rng = SeededRNG(seed: 0)
        return withNoGrad { model.hiddenStates(ids: ids, layout: .rows(batch: 1, length: ids.count), rng: &rng, training: false) }.data
    }
}

# The OFB search at full scale: the public code's defaults (HankYe/Once-for-Both search.py and
# exp_sh/run_exp.sh; the supplementary's section C):
# * 100 epochs (200 for DeiT-B: its config sets max_epochs), 20 of warm-up for the lr, w_p
#   (0.99 -> 0.1) and PMIM's kept share (0.95 -> 0.75);
# * one AdamW (eps 1e-8) with three kinds of groups stepped on the same batch: the weights and the
#   importance scores S (weight decay 1e-3, none on norms, biases, position embeddings, tokens,
#   scores), the sparsity scores alpha (betas (0.5, 0.999), weight decay 1e-3) and the PMIM
#   decoder; blr 2.5e-4 x effective batch / 256 = 1e-3 for 1024 (8 GPUs x 128; --auto-scale-lr
#   rescales for another total), warm-up from 1e-6, cosine to 1e-5, per iteration;
# * a pruning step every DeltaT = iterations per epoch // 3 with threshold 0.2; no gradient
#   clipping; label smoothing 0.1; mixup 0.8 / cutmix 1.0 switched on once the search is over
#   (the model configs set `model.search = dict(_base_.ofb_search, target_flops=...)`).
# The public --cooldown-epochs 10 has no effect there (search.py loops over --epochs and drops the
# epoch count create_scheduler returns), so none here either. Repeated augmentation: the OFB
# configs' dataset base, ../datasets/imagenet_bs128_deit_224_repeat-aug.py.
max_epochs = 100
warmup_epochs = 20
base_lr = 2.5e-4 * 1024 / 256

optim_wrapper = dict(
    type='OptimWrapper',
    constructor='mmdcs.OFBOptimWrapperConstructor',
    optimizer=dict(type='AdamW', lr=base_lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-3),
    paramwise_cfg=dict(
        norm_decay_mult=0.,
        bias_decay_mult=0.,
        flat_decay_mult=0.,
        custom_keys={
            '.pos_embed': dict(decay_mult=0.),
            '.cls_token': dict(decay_mult=0.),
            '.mask_token': dict(decay_mult=0.),
            '.relative_position_bias_table': dict(decay_mult=0.),
        },
        arch=dict(betas=(0.5, 0.999), weight_decay=1e-3),
        decoder=dict()),
)
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-6 / base_lr, end_factor=1.0, by_epoch=True, begin=0,
         end=warmup_epochs, convert_to_iter_based=True),
    dict(type='CosineAnnealingLR', T_max=max_epochs - warmup_epochs, eta_min=1e-5,
         by_epoch=True, begin=warmup_epochs, end=max_epochs, convert_to_iter_based=True),
]
train_cfg = dict(by_epoch=True, max_epochs=max_epochs, val_interval=1)
val_cfg = dict()
test_cfg = dict()
auto_scale_lr = dict(base_batch_size=1024)

custom_hooks = [
    dict(type='mmdcs.OFBSearchHook', warmup_epochs=warmup_epochs, w_p=(0.99, 0.1),
         keep_ratio=(0.95, 0.75), interval='auto', threshold=0.2)
]
# the search objective (the public defaults); a model config adds its target
ofb_search = dict(
    w_head=0.5, w_mlp=0.5, w_embed=0.5, w_flops=5., entropy=True, variance=True, norm=True,
    pmim=dict(window=47),
    after_search_augments=dict(augments=[dict(type='Mixup', alpha=0.8),
                                         dict(type='CutMix', alpha=1.0)]))
# label smoothing 0.1 (it also takes the soft labels of mixup / cutmix)
ofb_loss = dict(type='LabelSmoothLoss', label_smooth_val=0.1, mode='original')
